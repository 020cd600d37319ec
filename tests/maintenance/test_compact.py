"""``seo compact``: a stopped table's small files rewritten and published by its next compaction
batch - every reader reads every row once at every batch, a dry run changes nothing, a live
writer's table is refused, and a kill -9 anywhere in the run loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.maintenance.compact import MAINTENANCE_QUERY
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer
from tests.commit.power_cut_runs import seo
from tests.delta.helpers import commit_batch, delta_committer
from tests.delta.readback import delta_ids
from tests.torture.matrix_checks import snapshot

Q = "c0c0c0c0-0000-0000-0000-000000000000"
#: the tests' small files are all worth a rewrite
POLICY_ARGS = ["--min-age", "0s", "--min-files", "4", "--target-size", "1MB"]


def ids_upto(batch: int) -> Counter:
    return Counter(range((batch + 1) * 10))


def read_ids(root, *, as_of=None) -> Counter:
    return Counter(read.arrow(str(root), columns=["id"], as_of=as_of).column("id").to_pylist())


def live_names(root) -> list[str]:
    return [e.uri.rsplit("/", 1)[-1] for e in ManifestLog(open_storage(str(root))).files()]


def _writer(root, delta: bool):
    """The stream's writer of the tests' tables (compact interval 5)."""
    storage = open_storage(str(root))
    return delta_committer(storage, compact_interval=5) if delta else make_committer(storage, compact_interval=5)


def table_of(root, batches: int = 7, *, delta: bool = False) -> None:
    committer = _writer(root, delta)
    for b in range(batches):
        commit_batch(committer, Q, b, list(range(b * 10, b * 10 + 10)))
    committer.close()


@pytest.mark.parametrize("delta", [False, True], ids=["parquet", "delta"])
def test_compact_publishes_the_rewrite_at_the_next_compaction_batch(tmp_path, delta):
    root = tmp_path / "t"
    table_of(root, delta=delta)
    before = snapshot(open_storage(str(root)))
    code, out = seo("--json", "compact", "--dry-run", *POLICY_ARGS, str(root))
    assert code == 0, out
    plan = json.loads(out)
    assert plan["dryRun"] and len(plan["rewrites"]) == 1 and len(plan["rewrites"][0]["files"]) == 14, plan
    assert plan["batches"] == [7, 8, 9] and plan["filesBefore"] == 14 and plan["filesAfter"] == 1, plan
    assert snapshot(open_storage(str(root))) == before  # a dry run writes nothing

    code, out = seo("--json", "compact", *POLICY_ARGS, str(root))
    assert code == 0, out
    done = json.loads(out)
    assert done["batches"] == [7, 8, 9] and done["filesAfter"] == 1, done
    assert len(live_names(root)) == 1 and live_names(root)[0].startswith("part-compacted-9-")
    assert read_ids(root) == ids_upto(6)
    for older in range(10):
        assert read_ids(root, as_of=older) == ids_upto(min(older, 6)), f"as of {older}"
    if delta:  # one Delta commit for the run: an OPTIMIZE of no data change (the empty batches 7-8 have none)
        versions = sorted(int(p.name[:20]) for p in (root / "_delta_log").glob("*.json"))
        assert versions == list(range(8)), versions
        for version in range(8):
            assert delta_ids(root, version=version) == ids_upto(min(version, 6)), f"Delta version {version}"
        actions = [json.loads(line) for line in (root / "_delta_log" / f"{7:020d}.json").read_text().splitlines()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert info["operation"] == "OPTIMIZE" and info["isBlindAppend"] is False, info
        assert [a["txn"]["version"] for a in actions if "txn" in a] == [9]
        assert sum("remove" in a for a in actions) == 14 and all(a[k]["dataChange"] is False for a in actions for k in ("add", "remove") if k in a)
        # as of each manifest batch, the Delta version holding the same rows
        assert [read.delta_version(str(root), as_of=b) for b in range(10)] == [0, 1, 2, 3, 4, 5, 6, 6, 6, 7]
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out

    # the stream carries on: its next Spark batch is the table's next batch
    committer = _writer(root, delta)
    commit_batch(committer, Q, 7, list(range(70, 80)))
    assert committer.last_spark_batch(Q) == 7 and committer.last_spark_batch(MAINTENANCE_QUERY) == 2
    committer.close()
    assert read_ids(root) == ids_upto(7)


def test_nothing_to_compact_commits_nothing(tmp_path):
    root = tmp_path / "t"
    table_of(root, batches=2)
    before = snapshot(open_storage(str(root)))
    code, out = seo("compact", *POLICY_ARGS[:2], "--min-files", "8", str(root))
    assert code == 0 and "nothing to compact" in out, out
    assert ManifestLog(open_storage(str(root))).latest_batch_id(refresh=True) == 1
    assert snapshot(open_storage(str(root))) == before


def test_a_table_with_a_live_writer_is_refused_and_left_alone(tmp_path):
    root = tmp_path / "t"
    table_of(root)
    writer = make_committer(open_storage(str(root)), compact_interval=5)
    writer.open()
    try:
        latest = ManifestLog(open_storage(str(root))).latest_batch_id(refresh=True)
        code, out = seo("compact", *POLICY_ARGS, str(root))
        assert code == 1 and "lease" in out.lower(), out
        assert ManifestLog(open_storage(str(root))).latest_batch_id(refresh=True) == latest
    finally:
        writer.close()


_KILLED_RUN = """
import sys
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.maintenance.compact import compact_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import with_faults

storage = with_faults(open_storage(sys.argv[1]), crash_at=sys.argv[2])
compact_table(storage, CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20))
"""


@pytest.mark.parametrize("boundary", ["after-rewrite", "after-wal", "mid-move", "after-manifest", "after-commit"])
def test_a_kill_inside_compact_loses_nothing(tmp_path, boundary):
    """kill -9 in the run (its rewrite, or a claim of its compaction batch or an empty batch
    before it): readers see the table before or after, never half; the next run finishes it."""
    root = tmp_path / "t"
    table_of(root)
    run = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(root), boundary], capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert read_ids(root) == ids_upto(6)
    for args in (["recover"], ["compact", *POLICY_ARGS], ["gc", "--older-than", "0s"]):
        code, out = seo(*args, str(root))
        assert code == 0, out
    assert read_ids(root) == ids_upto(6)
    assert len(live_names(root)) == 1, live_names(root)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


_FROZEN_RUN = """
import sys
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.errors import WriterFencedError
from streaming_exactly_once.maintenance.compact import compact_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import with_faults

storage = with_faults(open_storage(sys.argv[1]), pause_at=sys.argv[2])
try:
    compact_table(storage, CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20), lease_timeout_ms=2000)
except WriterFencedError:
    sys.exit(7)
"""


def _freeze_compact(root, spec: str) -> subprocess.Popen:
    """A ``seo compact`` run that stops itself (SIGSTOP) at ``spec``."""
    frozen = subprocess.Popen([sys.executable, "-c", _FROZEN_RUN, str(root), spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not _stopped(frozen.pid):
        assert frozen.poll() is None and time.time() < deadline, frozen.communicate()
        time.sleep(0.05)
    return frozen


def _take_over_while_frozen(root, delta: bool, spec: str, work) -> tuple[int, str]:
    """Freeze a ``seo compact`` run at ``spec``; a writer whose clock is past the run's lease
    does ``work`` and closes; then the run wakes. Its exit code and stderr."""
    frozen = _freeze_compact(root, spec)
    try:
        taker = _writer(root, delta)
        taker.lease.clock = lambda: time.time() + 3600  # the frozen run's lease has run out
        work(taker)
        taker.close()
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    _, err = frozen.communicate(timeout=60)
    return frozen.returncode, err


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


@pytest.mark.parametrize("delta", [False, True], ids=["parquet", "delta"])
def test_a_frozen_compacts_late_claim_of_an_empty_batch_never_takes_the_streams_batch(tmp_path, delta):
    """``seo compact`` frozen before the claim of an empty batch, past its lease; the stream
    commits that batch id; the woken run writes its claim at the now free WAL path and is
    fenced. That claim lists no file: recovery must not take the stream's batch for it."""
    root = tmp_path / "t"
    table_of(root, delta=delta)

    def stream_commits_batch_7(stream):
        commit_batch(stream, Q, 7, list(range(70, 80)))

    returncode, err = _take_over_while_frozen(root, delta, "before-wal", stream_commits_batch_7)
    assert returncode == 7, err[-2000:]  # fenced
    assert (root / "_seo" / "wal" / "7").exists()  # its late claim
    stream = _writer(root, delta)
    commit_batch(stream, Q, 8, list(range(80, 90)))  # the stream restarts: its recovery discards the claim
    stream.close()
    assert read_ids(root) == ids_upto(8)
    if delta:
        assert delta_ids(root) == ids_upto(8)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_compact_deletes_none_of_the_streams_log_history(tmp_path):
    """The stream keeps more batches than the default (its ``min_batches_to_retain`` is not
    recorded in the table): a run must not delete any of them, or ``as_of`` fails."""

    root = tmp_path / "t"
    storage = open_storage(str(root))
    committer = make_committer(storage, compact_interval=5, min_batches_to_retain=1000, cleanup_delay_ms=0)
    for b in range(110):
        commit_batch(committer, Q, b, [b])
    committer.close()
    old = time.time() - 7200
    for path in (root / "_spark_metadata").iterdir():
        os.utime(path, (old, old))
    code, out = seo("compact", "--min-age", "0s", "--min-files", "4", "--target-size", "1MB", str(root))
    assert code == 0, out
    assert (root / "_spark_metadata" / "0").exists()
    assert read_ids(root, as_of=3) == Counter(range(4))
    assert read_ids(root) == Counter(range(110))


@pytest.mark.parametrize("delta", [False, True], ids=["parquet", "delta"])
def test_a_late_claim_whose_staged_rewrite_a_takeover_aborted_is_discarded(tmp_path, delta):
    """``seo compact`` frozen before the claim of its compaction batch; a writer takes the table
    over, and its recovery aborts and deletes the frozen run's staged rewrite; the run wakes and
    claims the batch after the takeover (it is fenced). That claim can never complete: the next
    start must discard it, not try to move a file that is gone."""

    root = tmp_path / "t"
    table_of(root, delta=delta)
    # the claims of empty batches 7 and 8 went through; the taker's recovery alone runs
    returncode, err = _take_over_while_frozen(root, delta, "before-wal@3", lambda taker: taker.open())
    assert returncode == 7, err[-2000:]  # fenced
    assert (root / "_seo" / "wal" / "9").exists()  # its late claim
    code, out = seo("recover", str(root))
    assert code == 0, out
    stream = _writer(root, delta)
    commit_batch(stream, Q, 7, list(range(70, 80)))
    stream.close()
    assert read_ids(root) == ids_upto(7)
    for older in range(10):  # batches 7 and 8 are the run's empty ones, 9 the stream's
        assert read_ids(root, as_of=older) == ids_upto(min(older, 6) if older < 9 else 7), f"as of {older}"
    if delta:
        assert delta_ids(root) == ids_upto(7)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_a_run_killed_after_an_empty_batch_leaves_a_delta_table_the_stream_goes_on_with(tmp_path):
    """kill -9 once the run's first empty batch is committed: the manifest holds batch 7, which
    holds no file, and the Delta log batch 6 - the same rows, so ``seo verify`` is clean and the
    stream's next batch commits to Delta on top of batch 6. A Delta reader as of batch 7 reads
    batch 6's version."""
    root = tmp_path / "t"
    table_of(root, delta=True)
    run = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(root), "after-commit"], capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert ManifestLog(open_storage(str(root))).latest_batch_id(refresh=True) == 7
    assert sorted(int(p.name[:20]) for p in (root / "_delta_log").glob("*.json")) == list(range(7))
    code, out = seo("--json", "verify", str(root))  # the run's claim and staged rewrite are left: warnings
    assert json.loads(out)["errors"] == 0 and not [p for p in json.loads(out)["problems"] if "delta" in p["kind"]], out
    committer = _writer(root, True)
    commit_batch(committer, Q, 7, list(range(70, 80)))  # the table's batch 8
    committer.close()
    assert read_ids(root) == delta_ids(root) == ids_upto(7)
    assert [read.delta_version(str(root), as_of=b) for b in (6, 7, 8)] == [6, 6, 7]
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out
