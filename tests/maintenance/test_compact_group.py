"""``seo compact`` of a dataset group: under the group's lease, each table (or the one named)
gets empty batches up to its own compaction batch, which publishes its rewrites; the group's
state keeps each table's status, rows and watermarks; every reader of every table reads every
row once at every batch; a kill -9 or a frozen run loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from streaming_exactly_once import read as readers
from streaming_exactly_once.maintenance.compact import MAINTENANCE_QUERY
from streaming_exactly_once.maintenance.group_tables import newest_group_record
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.identity import read_identity
from tests.commit.power_cut_runs import seo
from tests.commit.test_group_compaction import TABLES, commit, expected, group, live_names, read_ids
from tests.delta.readback import delta_ids
from tests.maintenance.test_compact import POLICY_ARGS, _stopped
from tests.torture.matrix_checks import snapshot

#: group batches the stream wrote: t0 has batches 0-6 (next compaction batch 8), t1 0-3 (next: 5)
WRITTEN = 7


def group_of(root, batches: int = WRITTEN) -> None:
    """A group written without compaction: two small files per table per batch."""
    committer = group(root, compaction=None)
    for g in range(batches):
        commit(committer, g)
    committer.close()


def state(root) -> dict:
    storage = open_storage(str(root))
    record = newest_group_record(storage, read_identity(storage))
    assert record is not None
    return record.datasets or {}


def assert_every_row_once(root, *, upto_group: int = WRITTEN - 1) -> None:
    for table in TABLES:
        assert read_ids(root, table) == expected(table, upto_group), table
    assert delta_ids(root / "t1") == expected("t1", upto_group)


def assert_verify_clean(root) -> None:
    for where in (root, root / "t0", root / "t1"):
        code, out = seo("--json", "verify", str(where))
        assert code == 0 and json.loads(out)["problems"] == [], (where, out)


def test_compact_of_a_group_publishes_each_tables_rewrite_at_its_own_compaction_batch(tmp_path):
    root = tmp_path / "g"
    group_of(root)
    before_state = state(root)
    before = snapshot(open_storage(str(root)))
    code, out = seo("--json", "compact", "--dry-run", *POLICY_ARGS, str(root))
    assert code == 0, out
    plan = json.loads(out)
    assert snapshot(open_storage(str(root))) == before  # a dry run writes nothing
    assert plan["group"] and plan["batches"] == [7, 8] and plan["tableBatches"] == {"t0": [7, 8], "t1": [4, 5]}, plan
    assert sorted((r["directory"], len(r["files"])) for r in plan["rewrites"]) == [("t0/p=a", 14), ("t1/p=a", 8)], plan
    assert plan["filesBefore"] == 22 and plan["filesAfter"] == 2, plan

    code, out = seo("--json", "compact", *POLICY_ARGS, str(root))
    assert code == 0, out
    done = json.loads(out)
    assert done["batches"] == [7, 8] and done["tableBatches"] == {"t0": [7, 8], "t1": [4, 5]}, done
    assert done["filesBefore"] == 22 and done["filesAfter"] == 2, done
    assert [n.startswith("part-compacted-8-") for n in live_names(root, "t0")] == [True]
    assert [n.startswith("part-compacted-5-") for n in live_names(root, "t1")] == [True]
    assert_every_row_once(root)
    for m in range(9):  # every batch of each table, the run's empty ones and its compaction batch included
        assert read_ids(root, "t0", as_of=m) == expected("t0", min(m, 6)), f"t0 as of {m}"
    for m in range(6):
        assert read_ids(root, "t1", as_of=m) == expected("t1", min(2 * m, 6)), f"t1 as of {m}"
    # t1's Delta log: its batches 0-3, then one OPTIMIZE for its compaction batch 5 (its empty batch 4 has none)
    assert sorted(int(p.name[:20]) for p in (root / "t1" / "_delta_log").glob("*.json")) == [0, 1, 2, 3, 4]
    for version in range(5):
        assert delta_ids(root / "t1", version=version) == expected("t1", min(2 * version, 6)), f"t1's Delta version {version}"
    assert [readers.delta_version(str(root / "t1"), as_of=m) for m in range(6)] == [0, 1, 2, 3, 3, 4]
    actions = [json.loads(line) for line in (root / "t1" / "_delta_log" / f"{4:020d}.json").read_text().splitlines()]
    assert next(a["commitInfo"]["operation"] for a in actions if "commitInfo" in a) == "OPTIMIZE"
    assert sum("remove" in a for a in actions) == 8 and all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    # each table's entry moved on to its compaction batch and kept what describes its data
    after_state = state(root)
    for table, last in (("t0", 8), ("t1", 5)):
        moved = {k: v for k, v in after_state[table].items() if k != "batchId"}
        kept = {k: v for k, v in before_state[table].items() if k != "batchId"}
        assert moved == kept, table  # lastGroupBatch too: the group batch its status and checks are about
        assert after_state[table]["batchId"] == last, after_state[table]
    assert_verify_clean(root)
    code, out = seo("--json", "log", "--kind", "commits", str(root))
    assert code == 0 and [(b["batchId"], b["tables"]) for b in json.loads(out)][-3:] == [(6, 2), (7, 2), (8, 2)], out
    code, out = seo("compact", *POLICY_ARGS, str(root))  # a second run: nothing left worth a rewrite
    assert code == 0 and "nothing to compact" in out, out

    # the stream carries on: its next Spark batch is the group's next batch
    stream = group(root, compaction=None)
    commit(stream, WRITTEN)
    assert stream.last_spark_batch(MAINTENANCE_QUERY) == 1 and stream.latest_batch_id == 9
    stream.close()
    assert_every_row_once(root, upto_group=WRITTEN)
    assert_verify_clean(root)


def test_compact_of_one_table_of_a_group_leaves_the_others_alone(tmp_path):
    root = tmp_path / "g"
    group_of(root)
    code, out = seo("compact", *POLICY_ARGS, str(root / "t1"))
    assert code == 0, out
    assert "published them in group batch 8 (after empty group batches 7-7)" in out and "t1: its batch 5" in out, out
    assert len(live_names(root, "t0")) == 14 and len(live_names(root, "t1")) == 1
    assert state(root)["t0"]["batchId"] == 6 and state(root)["t1"]["batchId"] == 5
    assert_every_row_once(root)
    assert_verify_clean(root)


def test_compact_of_a_group_a_live_writer_holds_is_refused_and_changes_nothing(tmp_path):
    root = tmp_path / "g"
    group_of(root)
    writer = group(root, compaction=None)
    writer.open()
    writer.janitor.drain()  # its own work files, prepared in the background at its start
    try:
        before = snapshot(open_storage(str(root)))
        code, out = seo("compact", *POLICY_ARGS, str(root / "t0"))
        assert code == 1 and "lease" in out.lower(), out
        assert snapshot(open_storage(str(root))) == before
    finally:
        writer.close()


_KILLED_RUN = """
import sys
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.errors import WriterFencedError
from streaming_exactly_once.maintenance.compact import compact_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import with_faults

storage = with_faults(open_storage(sys.argv[1]), crash_at=sys.argv[2], pause_at=sys.argv[3] or None)
try:
    compact_table(storage, CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20), lease_timeout_ms=2000)
except WriterFencedError:
    sys.exit(7)
"""


@pytest.mark.parametrize(
    "boundary",
    [
        "after-rewrite",
        "after-wal",
        pytest.param("mid-members", marks=pytest.mark.long),
        pytest.param("after-members", marks=pytest.mark.long),
        "mid-move",  # the compaction batch (the empty one before it moves nothing): its rewrites half moved
        "mid-members@2",  # ... and half published
        pytest.param("after-commit@2", marks=pytest.mark.long),
    ],
)
def test_a_kill_inside_a_groups_compact_loses_nothing(tmp_path, boundary):
    """kill -9 in a group's run: every table reads every row once before and after recovery;
    the next run finishes the compaction; verify is clean."""
    root = tmp_path / "g"
    group_of(root)
    run = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(root), boundary, ""], capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    for table in TABLES:  # a table whose batch was half published reads it or not, never half
        assert read_ids(root, table) == expected(table, WRITTEN - 1), table
    for args in (["recover"], ["compact", *POLICY_ARGS], ["gc", "--older-than", "0s"]):
        code, out = seo(*args, str(root))
        assert code == 0, (args, out)
    assert_every_row_once(root)
    assert [len(live_names(root, t)) for t in TABLES] == [1, 1]
    assert_verify_clean(root)


@pytest.mark.parametrize("spec", ["after-rewrite", "before-wal@2", "mid-members@2"])
def test_a_frozen_groups_compact_never_publishes_after_a_takeover(tmp_path, spec):
    """A run frozen (SIGSTOP) in its rewrite, before the claim of its compaction batch, or half
    through publishing it; the stream takes the group over (its lease ran out) and commits a
    batch; the run wakes: it is fenced, and nothing it did after the takeover reaches a reader."""
    root = tmp_path / "g"
    group_of(root)
    frozen = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(root), "", spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not _stopped(frozen.pid):
            assert frozen.poll() is None and time.time() < deadline, frozen.communicate()
            time.sleep(0.05)
        stream = group(root, compaction=None)
        stream.lease.clock = lambda: time.time() + 3600  # the frozen run's lease has run out
        commit(stream, WRITTEN)
        stream.close()
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    _, err = frozen.communicate(timeout=60)
    assert frozen.returncode in (0, 7), err[-2000:]  # fenced, or done before the takeover mattered
    assert_every_row_once(root, upto_group=WRITTEN)
    stream = group(root, compaction=None)
    commit(stream, WRITTEN + 1)  # the next start: its recovery settles any late claim
    stream.close()
    assert_every_row_once(root, upto_group=WRITTEN + 1)
    code, out = seo("gc", "--older-than", "0s", str(root))
    assert code == 0, out
    assert_every_row_once(root, upto_group=WRITTEN + 1)
    assert_verify_clean(root)


def test_a_table_the_groups_state_does_not_name_is_refused(tmp_path):
    root = tmp_path / "g"
    group_of(root)
    (root / "t9" / "_seo").mkdir(parents=True)
    (root / "t9" / "_spark_metadata").mkdir()  # a table directory the group's state does not name
    (root / "t9" / "_seo" / "table").write_bytes((root / "t0" / "_seo" / "table").read_bytes())
    before = snapshot(open_storage(str(root)))
    code, out = seo("compact", *POLICY_ARGS, str(root / "t9"))
    assert code != 0 and "no published batch" in out, out
    assert snapshot(open_storage(str(root))) == before


def test_a_table_written_before_schema_records_keeps_its_schema_through_compacts_empty_batches(tmp_path):
    """A table with no schema record (written by a release before them) has its schema only in
    its last commit records; the run's empty batches record none, so the run adopts it first:
    the stream's next batch is still checked against it."""
    import shutil

    root = tmp_path / "g"
    group_of(root)
    shutil.rmtree(root / "t1" / "_seo" / "schema")
    code, out = seo("compact", *POLICY_ARGS, "--dry-run", str(root / "t1"))
    assert code == 0 and not (root / "t1" / "_seo" / "schema").exists(), out  # a dry run adopts nothing
    code, out = seo("compact", *POLICY_ARGS, str(root / "t1"))
    assert code == 0, out
    adopted = sorted(p.name for p in (root / "t1" / "_seo" / "schema").iterdir())
    assert adopted == ["3"], adopted  # at its last batch before the run
    assert_every_row_once(root)
    assert_verify_clean(root)
