"""``seo verify`` calls a table "in flight" (warnings) only where a pending claim will really
complete it at the next start: a stale claim of a fenced writer, a claim on one batch of several
missing ones, or a group's batch numbers taken for a member's never hide damage - and a crash
that recovery completes is never called damage."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

from streaming_exactly_once.maintenance.repair import recover_table
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.commit.processes import QA, Writer

Q = "11111111-1111-1111-1111-111111111111"


def kinds(root: Path) -> tuple[bool, set[str], set[str]]:
    report = verify_table(open_storage(str(root)))
    return report.ok, {p.kind for p in report.errors}, {p.kind for p in report.warnings}


STALE_CLAIM_CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import FaultInjectingStorage, call_at, rules
from tests.commit.helpers import CommitterOptions, TableCommitter, make_committer, stage_and_commit
root, q = {root!r}, {q!r}
w = TableCommitter(FaultInjectingStorage(open_storage(root)), CommitterOptions(heartbeat=False, lease_timeout_ms=300))
for b in range(2):
    stage_and_commit(w, q, b, list(range(b * 10, b * 10 + 10)))
def takeover():  # the writer is paused after its fence check: a successor publishes batch 2
    time.sleep(0.4)
    s = make_committer(open_storage(root))
    stage_and_commit(s, q, 2, list(range(20, 30)))
    s.close()
w.storage.arm([call_at("before-wal", takeover)] + rules(crash_at="after-wal"))
stage_and_commit(w, q, 2, list(range(20, 30)))
"""


def test_a_stale_claim_on_a_published_batch_does_not_hide_a_deleted_record(tmp_path):
    root = tmp_path / "t"
    child = STALE_CLAIM_CHILD.format(repo=str(Path(__file__).resolve().parents[2]), root=str(root), q=Q)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]  # killed right after its (stale) claim
    assert os.listdir(root / "_seo" / "wal") == ["2"]
    ok, errors, warnings = kinds(root)
    assert ok and "pending-wal" in warnings, (errors, warnings)
    (root / "_seo" / "commits" / "2").unlink()  # damage by hand
    ok, errors, _ = kinds(root)
    assert not ok and "log-mismatch" in errors  # not excused by the claim recovery will discard
    assert recover_table(open_storage(str(root))).discarded == [2]


def test_delta_behind_by_more_than_the_pending_claim_is_an_error(tmp_path):
    root = tmp_path / "d"
    program = {
        "name": "A",
        "root": str(root),
        "delta": {"checkpoint_interval": 100},
        "options": {"lease_timeout_ms": 500},
        "steps": [
            {"do": "open"},
            {"do": "commits", "query": QA, "count": 3, "base": 0, "drain": True},
            {"do": "commits", "query": QA, "count": 1, "base": 3, "crash_at": "after-manifest"},
        ],
    }
    assert Writer(program).wait(120) == -9
    ok, errors, warnings = kinds(root)
    assert ok and "delta-pending" in warnings, (errors, warnings)  # a crash the next start completes
    os.unlink(sorted(glob.glob(f"{root}/_delta_log/*.json"))[-1])  # batch 2's Delta commit, by hand
    ok, errors, _ = kinds(root)
    assert not ok and "delta-behind" in errors


def test_a_group_member_ahead_by_a_pending_batch_is_in_flight_whatever_its_batch_numbers(tmp_path):
    root = tmp_path / "g"
    program = {
        "name": "A",
        "root": str(root),
        "group": ["t0", "t1"],
        "options": {"lease_timeout_ms": 500},
        "steps": [
            {"do": "open"},
            {"do": "commits", "query": QA, "count": 1, "base": 0, "rows": 2, "drain": True},  # t0 and t1
            {"do": "commits", "query": QA, "count": 1, "base": 0, "rows": 1, "drain": True},  # t0 only
            {"do": "commits", "query": QA, "count": 1, "base": 0, "rows": 2, "crash_at": "after-members"},
        ],
    }
    assert Writer(program).wait(120) == -9
    ok, errors, warnings = kinds(root)
    assert ok and "group-pending" in warnings, (errors, warnings)  # t1's batch 1 is the group's batch 2
    assert recover_table(open_storage(str(root))).rolled_forward == [2]
    assert kinds(root) == (True, set(), set())


def test_a_first_batch_killed_after_its_manifest_is_in_flight_not_damage(tmp_path):
    """No commit record yet, the manifest at batch 0, its claim pending: the next start
    completes it (a table's first batch, or the adoption of another tool's files)."""
    root = tmp_path / "first"
    program = {
        "name": "A",
        "root": str(root),
        "options": {"lease_timeout_ms": 500},
        "steps": [{"do": "open"}, {"do": "commits", "query": QA, "count": 1, "base": 0, "crash_at": "after-manifest"}],
    }
    assert Writer(program).wait(120) == -9
    ok, errors, warnings = kinds(root)
    assert ok and "pending-wal" in warnings, (errors, warnings)
    (root / "_seo" / "wal" / "0").unlink()  # no claim left to complete it: damage
    ok, errors, _ = kinds(root)
    assert not ok and "log-mismatch" in errors
