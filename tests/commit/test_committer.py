"""The commit protocol: exactly once across failures at every boundary, replays and writers."""

from __future__ import annotations

from collections import Counter

import pytest

from streaming_exactly_once.commit.background.compaction_preparation import preparation_of
from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore
from streaming_exactly_once.errors import ConcurrentWriterError, WriterFencedError
from streaming_exactly_once.table.layout import STAGING_DIR, WAL_DIR
from streaming_exactly_once.testing.faults import (
    BOUNDARIES,
    FEATURE_ONLY,
    GROUP_ONLY,
    FaultInjectingStorage,
    InjectedFailure,
    call_at,
)
from tests.commit.helpers import make_committer, stage_and_commit, visible_rows

Q = "11111111-1111-1111-1111-111111111111"
Q2 = "22222222-2222-2222-2222-222222222222"


def rows_of(batch):
    return list(range(batch * 10, batch * 10 + 10))


def test_batches_commit_and_logs_are_written(layer_storage):
    c = make_committer(layer_storage, compact_interval=3)
    for b in range(7):
        result = stage_and_commit(c, Q, b, rows_of(b))
        assert result.status == "committed" and result.batch_id == b
        assert result.timings["manifest"] >= 0 and "wal" in result.timings
    assert visible_rows(layer_storage) == sorted(sum((rows_of(b) for b in range(7)), []))
    c.janitor.drain()
    assert layer_storage.list_dir(WAL_DIR) == [] and layer_storage.list_dir(STAGING_DIR) == []
    assert c.logs.commits.record(6).spark_batch_id == 6
    assert "5.compact" in {e.name for e in layer_storage.list_dir("_spark_metadata")}
    assert "5.compact" in {e.name for e in layer_storage.list_dir("_seo/commits")}
    assert len(c.logs.sources.committed_paths()) == 7
    c.close()


def test_replayed_batch_is_skipped_even_after_restart(layer_storage):
    c = make_committer(layer_storage)
    stage_and_commit(c, Q, 0, rows_of(0))
    assert stage_and_commit(c, Q, 0, rows_of(0)) is None
    c.close()
    again = make_committer(layer_storage)
    assert stage_and_commit(again, Q, 0, rows_of(0)) is None
    # a new query id (recreated checkpoint) restarting at batch 0 is not skipped
    assert stage_and_commit(again, Q2, 0, [1000]).status == "committed"
    assert visible_rows(layer_storage) == rows_of(0) + [1000]


@pytest.mark.parametrize(
    "boundary",
    [b for b in BOUNDARIES if b not in ("before-stage", "after-stage", *GROUP_ONLY, *FEATURE_ONLY)],
)
@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_failure_at_every_boundary_then_restart(local_storage, boundary, mode):
    if mode == "direct" and boundary in ("mid-move", "after-move"):
        pytest.skip("direct mode moves nothing")
    if mode == "rename" and boundary == "after-cleanup":
        pytest.skip("rename mode has no intents to clean up inside the WAL")
    storage = local_storage
    c = make_committer(storage)
    stage_and_commit(c, Q, 0, rows_of(0), mode=mode)
    failing = make_committer(storage, fail_at=f"{boundary}@1")
    c.close()
    if boundary == "after-wal-delete":
        # the claim is dropped off the batch's path, on the janitor's thread: the batch has
        # committed, the failure there is logged, and the staging leftovers stay behind
        assert stage_and_commit(failing, Q, 1, rows_of(1), mode=mode).status == "committed"
        failing.janitor.drain()
        assert storage.list_dir(WAL_DIR) == [] and storage.list_dir(STAGING_DIR) != []
    elif boundary == "after-records-sync":
        # the janitor's sync of the offsets and sources records failed: the batch has committed,
        # its claim stayed for the retention pass queued after it, which synced the records and
        # deleted it; the staging leftovers wait for the next start
        assert stage_and_commit(failing, Q, 1, rows_of(1), mode=mode).status == "committed"
        failing.janitor.drain()
        assert storage.list_dir(WAL_DIR) == [] and storage.list_dir(STAGING_DIR) != []
    else:
        with pytest.raises(InjectedFailure):
            stage_and_commit(failing, Q, 1, rows_of(1), mode=mode)
    failing.lease.stop_heartbeat()
    # what readers see right now: batch 1 entirely or not at all
    assert visible_rows(storage) in (rows_of(0), rows_of(0) + rows_of(1))
    # restart (a new process: the old lease is ours, same pid, so simulate its release)
    failing.close()
    restarted = make_committer(storage)
    stage_and_commit(restarted, Q, 1, rows_of(1), mode=mode)  # Spark re-delivers batch 1
    stage_and_commit(restarted, Q, 2, rows_of(2), mode=mode)
    restarted.janitor.drain()
    assert visible_rows(storage) == rows_of(0) + rows_of(1) + rows_of(2)
    assert storage.list_dir(WAL_DIR) == [] and storage.list_dir(STAGING_DIR) == []
    # no orphan data files either (direct mode writes final names before the claim)
    data_files = [f.path for f in storage.walk_files("p=a")]
    assert len(data_files) == 6  # 3 batches x 2 files


def test_same_process_retry_after_failure(memory_storage):
    c = make_committer(memory_storage, fail_at="after-manifest@1")
    with pytest.raises(InjectedFailure):
        stage_and_commit(c, Q, 0, rows_of(0))
    # foreachBatch retry in the same process: recovery rolls the WAL forward, then the replay skips
    assert stage_and_commit(c, Q, 0, rows_of(0)) is None
    assert c.last_recovery.rolled_forward == [0]
    assert visible_rows(memory_storage) == rows_of(0)


def test_second_live_writer_fails_fast(memory_storage):
    first = make_committer(memory_storage)
    first.open()
    second = make_committer(memory_storage)
    with pytest.raises(ConcurrentWriterError) as err:
        second.open()
    assert "being written by" in str(err.value) and "epoch 1" in str(err.value)
    stage_and_commit(first, Q, 0, rows_of(0))  # first unaffected
    assert visible_rows(memory_storage) == rows_of(0)


def test_expired_lease_is_taken_over_and_old_writer_is_fenced(memory_storage):
    clock = [1000.0]
    zombie = make_committer(memory_storage, timeout_ms=5_000)
    zombie.lease.clock = lambda: clock[0]
    stage_and_commit(zombie, Q, 0, rows_of(0))
    clock[0] += 10  # the zombie is paused past its lease
    successor = make_committer(memory_storage, timeout_ms=5_000)
    successor.lease.clock = lambda: clock[0]
    successor.open()
    assert successor.epoch == 2
    with pytest.raises(WriterFencedError):
        stage_and_commit(zombie, Q, 1, rows_of(1))
    stage_and_commit(successor, Q, 1, rows_of(1))
    assert visible_rows(memory_storage) == rows_of(0) + rows_of(1)


def test_zombie_claim_after_takeover_never_publishes(memory_storage):
    """The zombie passed its first fence check and paused; the successor took over; then the
    zombie wrote its WAL claim. Its second fence check stops it; the successor removes the claim."""
    clock = [1000.0]
    faulty = FaultInjectingStorage(memory_storage)
    zombie = make_committer(faulty, timeout_ms=5_000)
    zombie.lease.clock = lambda: clock[0]
    stage_and_commit(zombie, Q, 0, rows_of(0))
    successor = make_committer(memory_storage, timeout_ms=5_000)
    successor.lease.clock = lambda: clock[0]

    def takeover_while_paused():  # the zombie is "paused" right before its claim
        clock[0] += 10
        successor.open()

    faulty.arm([call_at("before-wal", takeover_while_paused)])
    with pytest.raises(WriterFencedError):
        stage_and_commit(zombie, Q, 1, rows_of(1))
    assert CommitSequenceStore(memory_storage).pending() == [1]  # the zombie's claim, not executed
    assert visible_rows(memory_storage) == rows_of(0)
    stage_and_commit(successor, Q2, 0, [5000])  # successor claims batch 1: removes the fenced claim
    successor.janitor.drain()  # its own claim is dropped off the batch's path
    assert visible_rows(memory_storage) == rows_of(0) + [5000]
    assert CommitSequenceStore(memory_storage).pending() == []
    assert not successor.is_committed(Q, 1)  # the zombie's batch will be re-run by its query


def test_staging_that_fails_after_a_takeover_says_the_writer_was_fenced(memory_storage):
    """A writer frozen while it stages wakes up to find its staging removed by the successor's
    recovery: its own write fails, and the error names the cause - the fencing - with the
    storage's error as its cause."""
    clock = [1000.0]
    zombie = make_committer(memory_storage, timeout_ms=5_000)
    zombie.lease.clock = lambda: clock[0]
    stage_and_commit(zombie, Q, 0, rows_of(0))
    successor = make_committer(memory_storage, timeout_ms=5_000)
    successor.lease.clock = lambda: clock[0]
    with pytest.raises(WriterFencedError) as info:
        with zombie.batch(Q, 1, mode="rename") as attempt:
            staged = f"{attempt.staging_dir}/data/p=a/part-00000.parquet"
            memory_storage.put_if_absent(staged, b"half of a batch")
            clock[0] += 10  # frozen past its lease
            successor.open()  # recovery aborts the abandoned attempt
            memory_storage.read_bytes(staged)  # the woken writer's next touch of its staging
    assert isinstance(info.value.__cause__, FileNotFoundError)
    with pytest.raises(KeyError):  # a failure of its own, not the storage's, is not dressed up
        with successor.batch(Q, 1, mode="rename"):
            raise KeyError("a bug in the caller")
    stage_and_commit(successor, Q, 1, rows_of(1))
    assert visible_rows(memory_storage) == rows_of(0) + rows_of(1)


def test_claim_made_before_takeover_is_rolled_forward_by_successor(memory_storage):
    clock = [1000.0]
    zombie = make_committer(memory_storage, timeout_ms=5_000, fail_at="after-wal@1")
    zombie.lease.clock = lambda: clock[0]
    with pytest.raises(InjectedFailure):
        stage_and_commit(zombie, Q, 0, rows_of(0))
    clock[0] += 10
    successor = make_committer(memory_storage, timeout_ms=5_000)
    successor.lease.clock = lambda: clock[0]
    report = successor.open()
    assert report.rolled_forward == [0]
    assert successor.is_committed(Q, 0)
    assert visible_rows(memory_storage) == rows_of(0)
    assert successor.logs.commits.record(0).committed_by_epoch == 2


def test_empty_batch_publishes_nothing(memory_storage):
    c = make_committer(memory_storage)
    c.ensure_open()
    attempt = c.begin(Q, 0, mode="rename")
    result = c.commit(attempt, [], num_rows=0)
    assert result.status == "empty"
    assert c.logs.manifest.latest_batch_id(refresh=True) is None
    assert memory_storage.list_dir(STAGING_DIR) == []


class ListingSpy:
    """Storage proxy that records every directory listing."""

    def __init__(self, inner):
        self._inner = inner
        self.listed: list[str] = []

    def list_dir(self, path=""):
        self.listed.append(path)
        return self._inner.list_dir(path)

    def walk_files(self, path=""):
        self.listed.append(path + "/**")
        return self._inner.walk_files(path)

    def hidden_files(self, path="", *, recursive=True):
        self.listed.append(path + ("/**" if recursive else ""))
        return self._inner.hidden_files(path, recursive=recursive)

    def child(self, path):
        return ListingSpy(self._inner.child(path))

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_per_batch_commit_lists_no_growing_directory(local_storage):
    spy = ListingSpy(local_storage)
    c = make_committer(spy, compact_interval=3, min_batches_to_retain=2, cleanup_delay_ms=0)
    stage_and_commit(c, Q, 0, rows_of(0))
    spy.listed.clear()
    for b in range(1, 40):  # many compactions and deletions
        stage_and_commit(c, Q, b, rows_of(b))
    c.janitor.drain()
    # staging is per batch; the index directory holds one file per retained compact file (bounded)
    growing = Counter(p for p in spy.listed if not p.startswith(("_seo/staging/", "_seo/manifest-index")))
    # each log is listed once, the first time retention runs (to find its oldest file), never again
    assert all(n == 1 for n in growing.values()), f"repeated listings of growing directories: {growing}"
    assert visible_rows(local_storage) == sorted(sum((rows_of(b) for b in range(40)), []))
    names = {e.name for e in local_storage.list_dir("_spark_metadata")}
    assert len(names) <= 8  # retention keeps the log small: two compacts and the deltas after them
    assert len(local_storage.list_dir("_seo/manifest-index")) <= 3


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_a_claim_of_the_previous_release_rolls_forward(local_storage, mode):
    """Upgrading mid-commit: the previous release wrote ``v2`` WAL entries and staging names
    without the epoch suffix (``M-<attempt>``); this one reads both and completes the batch."""
    import re

    storage = local_storage
    failing = make_committer(storage, fail_at="after-wal")
    with pytest.raises(InjectedFailure):
        stage_and_commit(failing, Q, 0, list(range(10)), mode=mode)
    failing.close()
    (name,) = [e.name for e in storage.list_dir(STAGING_DIR)]
    old_name = re.sub(r"-e\d+$", "", name)
    storage.rename(f"{STAGING_DIR}/{name}", f"{STAGING_DIR}/{old_name}")
    entry = storage.read_bytes(f"{WAL_DIR}/0").decode()
    assert entry.startswith("v3\n")
    old_entry = "v2\n" + entry[3:].replace(f"{STAGING_DIR}/{name}", f"{STAGING_DIR}/{old_name}")
    storage.atomic_write(f"{WAL_DIR}/0", old_entry.encode())
    c = make_committer(storage)
    assert c.open().rolled_forward == [0]
    assert visible_rows(storage) == list(range(10))
    assert stage_and_commit(c, Q, 0, list(range(10)), mode=mode) is None  # Spark's replay is skipped
    assert not list(storage.list_dir(STAGING_DIR))


def test_a_new_run_of_the_same_query_in_the_same_application_takes_over_at_once(local_storage):
    """Under Spark Connect the worker of an ended run lingers with a live lease; the next run of
    the *same* query in the *same* application (Spark runs one at a time) takes over without
    waiting, and the old holder is fenced. Any other writer still fails fast."""
    from streaming_exactly_once.commit.protocol.lease import Lease, read_lease_state

    def lease(query: str, app: str) -> Lease:
        made = Lease(local_storage, timeout_ms=60_000)
        made.query_id, made.spark_app = query, app
        return made

    old = lease("q-1", "app-1")
    old.acquire()
    for query, app in (("q-2", "app-1"), ("q-1", "app-2")):
        with pytest.raises(ConcurrentWriterError):
            lease(query, app).acquire()  # another query, or the same checkpoint in another application
    new = lease("q-1", "app-1")
    assert new.acquire() == old.epoch + 1
    with pytest.raises(WriterFencedError):
        old.check_fence()
    holder = read_lease_state(local_storage).writer
    assert (holder.query_id, holder.spark_app) == ("q-1", "app-1")


def test_a_changed_compact_interval_is_a_named_config_error(local_storage):
    """r12: the interval is part of the table (Spark derives it from .compact names); a writer
    configured otherwise gets a ConfigError naming both values, not a 'missing batch' error."""
    from streaming_exactly_once.errors import ConfigError

    c = make_committer(local_storage, compact_interval=3)
    for batch in range(4):
        stage_and_commit(c, Q, batch, [batch])
    c.close()
    with pytest.raises(ConfigError, match="created with compact_interval=3.*compact_interval=5"):
        make_committer(local_storage, compact_interval=5).open()
    assert visible_rows(local_storage) == [0, 1, 2, 3]


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_staging_left_by_a_finished_roll_forward_is_removed_at_the_next_start(local_storage, mode):
    """Found by the Delta torture run (a kill 3 ms after the Delta step of a roll-forward): a
    recovery judged a claim 'commit', completed it and deleted its WAL entry, and died before
    deleting the staging directory. The next start must remove those leftovers (only them: the
    batch's data is published) instead of skipping them forever as 'being rolled forward'."""
    from streaming_exactly_once.maintenance.verify import verify_table

    storage = local_storage
    failing = make_committer(storage, fail_at="after-commit")
    with pytest.raises(InjectedFailure):
        stage_and_commit(failing, Q, 0, list(range(10)), mode=mode)
    failing.close()
    (name,) = [e.name for e in storage.list_dir(STAGING_DIR)]
    c = make_committer(storage)
    assert c.open().rolled_forward == [0]  # writes the 'commit' verdict, deletes WAL entry and staging
    c.close()
    storage.put_if_absent(f"{STAGING_DIR}/{name}/data/p=a/.part-00000.c000.snappy.parquet.crc", b"crc")  # the leftover
    assert [p.kind for p in verify_table(storage).problems] == ["staging"]
    c = make_committer(storage)
    report = c.open()
    assert not list(storage.list_dir(STAGING_DIR)) and report.aborted_attempts == []
    assert visible_rows(storage) == list(range(10))
    assert stage_and_commit(c, Q, 1, [10]) is not None
    c.close()
    assert verify_table(storage).problems == []


def test_retention_runs_behind_the_commit_and_its_failure_fails_no_batch(local_storage, caplog, monkeypatch):
    """#14: deleting expired log files is background work. A batch is published and returned
    before it runs, a failing deletion is logged and fails nothing, and the next pass catches up."""
    import logging

    from streaming_exactly_once.log.compactible_log import CompactibleLog

    c = make_committer(local_storage, compact_interval=3, min_batches_to_retain=2, cleanup_delay_ms=0)
    real = CompactibleLog.delete_expired

    def refused(self, *args, **kwargs):
        raise PermissionError("injected: the disk refuses the deletion")

    monkeypatch.setattr(CompactibleLog, "delete_expired", refused)
    with caplog.at_level(logging.WARNING):
        for b in range(12):
            stage_and_commit(c, Q, b, rows_of(b))  # raises nothing
        c.janitor.drain()
    assert local_storage.exists("_spark_metadata/0")  # nothing deleted yet
    assert "injected" in caplog.text
    monkeypatch.setattr(CompactibleLog, "delete_expired", real)
    stage_and_commit(c, Q, 12, rows_of(12))
    c.janitor.drain()
    assert not local_storage.exists("_spark_metadata/0")  # the next pass caught up
    assert visible_rows(local_storage) == sorted(sum((rows_of(b) for b in range(13)), []))


def test_a_dataset_groups_retention_passes_coalesce_without_dropping_a_member(local_storage):
    """Red team #14: when batches outrun the janitor, the pass that runs takes every log that is
    due - also the member table that the later batches did not touch (it may never be touched
    again, and its expired files would stay for good)."""
    import threading

    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter, MemberBatch

    def commit(g, b, tables):
        g.ensure_open()
        attempt = g.begin(Q, b, mode="rename")
        members = []
        for table in tables:
            staged = f"{attempt.staging_dir}/data/{table}/p=a/part-{b:05d}.txt"
            local_storage.put_if_absent(staged, str(b).encode())
            info = local_storage.info(staged)
            files = [StagedFile(final=f"p=a/part-{b:05d}.txt", size=info.size, mtime_ms=info.mtime_ms, staged=staged)]
            members.append(MemberBatch(table=table, files=files, rows=1, format="parquet"))
        g.commit_group(attempt, members, input_files=[InputFile(source=0, path=f"file:///in/{b}.csv", timestamp=1)])

    g = GroupCommitter(local_storage, CommitterOptions(heartbeat=False, compact_interval=3, min_batches_to_retain=1, cleanup_delay_ms=0))
    for b in range(8):
        commit(g, b, ["t0", "t1"])
    g.janitor.drain()
    gate = threading.Event()
    g.janitor.submit(gate.wait)  # the janitor is busy (a slow index build, a big deletion)
    commit(g, 8, ["t0", "t1"])  # member batch 8 of both: a compaction, retention due for both
    commit(g, 9, ["t1"])  # only t1: its pass coalesces with the one above
    gate.set()
    g.janitor.drain()
    g.close()
    names = {e.name for e in local_storage.list_dir("t0/_spark_metadata") if not e.name.startswith(".")}
    assert names == {"5.compact", "6", "7", "8.compact"}


@pytest.mark.parametrize("write", ["claim", "bookkeeping"])
def test_a_fenced_writers_write_whose_temp_file_was_removed_reports_the_fencing(tmp_path, monkeypatch, write):
    """Red team #14 G6: the writer that takes a table over removes the temp files an earlier
    writer left (``table.temp_files``); a frozen writer that wakes up mid-write then gets
    ``FileNotFoundError`` from its rename. It publishes nothing either way, and it says why:
    ``WriterFencedError``, as for every other write of a fenced writer."""
    import time

    from streaming_exactly_once.commit.protocol.lease import Lease
    from streaming_exactly_once.storage import open_storage

    storage = open_storage(str(tmp_path / "t"))
    zombie = make_committer(storage, timeout_ms=50, prepare_compactions=False)
    stage_and_commit(zombie, Q, 0, [0, 1])
    real = type(storage).put_if_absent
    target = f"{WAL_DIR}/1" if write == "claim" else "_seo/offsets/1"

    def cut_off(self, path, data):
        if path == target:  # frozen mid-write; meanwhile a successor takes over and removes the temp file
            time.sleep(0.1)
            successor = Lease(open_storage(str(tmp_path / "t")), timeout_ms=60_000)
            successor.acquire()
            successor.release()  # the zombie stays fenced: its epoch is no longer the newest
            raise FileNotFoundError(2, "No such file or directory", self.uri(path))
        return real(self, path, data)

    monkeypatch.setattr(type(storage), "put_if_absent", cut_off)
    if write == "claim":  # the fence check before the claim passes: the takeover happens during it
        with pytest.raises(WriterFencedError, match="will not claim"):
            stage_and_commit(zombie, Q, 1, [2, 3])
    else:
        with pytest.raises(WriterFencedError, match="will not complete"):
            stage_and_commit(zombie, Q, 1, [2, 3])
    monkeypatch.undo()
    successor = make_committer(storage)
    successor.ensure_open()
    assert visible_rows(storage) == ([0, 1] if write == "claim" else [0, 1, 2, 3])  # a claimed batch is rolled forward
    successor.close()


def test_the_next_compaction_is_prepared_from_the_start_not_after_the_first_batch(local_storage):
    """#14: the copy that prepares the next compact file starts when the writer opens the
    table. Started only by the first batch, the first compaction after a restart found it
    unfinished whenever batches came quickly (the copy's first check of the previous file alone
    imports pyarrow's parquet module), and its own batch did the copy: ~60 ms at 250k live files."""
    first = make_committer(local_storage, compact_interval=3)
    for b in range(4):
        stage_and_commit(first, "q1", b, [b * 10, b * 10 + 1])
    first.close()
    second = make_committer(local_storage, compact_interval=3)
    second.open()
    second.janitor.drain()  # the background task the open queued
    work = preparation_of(second.logs.manifest)._work
    assert work is not None and work.compact_id == 5 and work.included == [2, 3], work  # compact 2 and delta 3
    for b in range(4, 8):
        stage_and_commit(second, "q1", b, [b * 10, b * 10 + 1])
    second.close()
    assert visible_rows(local_storage) == sorted(r for b in range(8) for r in (b * 10, b * 10 + 1))


def test_the_first_index_builds_imports_are_done_when_the_writer_opens_a_large_table(tmp_path):
    """#14: pyarrow's parquet module and pandas (which pyarrow imports at the first array it
    builds from Python objects) took ~0.45 s of the first compaction's background index build,
    beside the next batches. A writer of a table whose compact file the storage copies imports
    them in the background once it opened the table; of a small table, it does not (a writer
    that stops after a batch would wait for them at its close). In fresh processes, where
    neither module is imported yet."""
    import subprocess
    import sys
    from pathlib import Path

    from streaming_exactly_once.storage import open_storage

    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=3)
    for b in range(4):
        stage_and_commit(c, Q, b, [b])
    c.close()
    repo = Path(__file__).resolve().parents[2]

    def imported_after_open(threshold, wait_s):
        code = (
            "import sys\n"
            "from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter\n"
            "from streaming_exactly_once.log.compactible_log import CompactibleLog\n"
            "from streaming_exactly_once.storage import open_storage\n"
            f"CompactibleLog.copy_threshold = {threshold}\n"
            "before = [m for m in ('pandas', 'pyarrow.parquet') if m in sys.modules]\n"
            f"c = TableCommitter(open_storage({str(tmp_path / 't')!r}), CommitterOptions(heartbeat=False, compact_interval=3))\n"
            "c.open()\n"
            "from streaming_exactly_once.manifest.manifest_index import WARMED_UP\n"
            f"WARMED_UP.wait({wait_s})\n"
            "print(before, [m for m in ('pandas', 'pyarrow.parquet') if m in sys.modules])\n"
            "c.close()\n"
        )
        out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120, check=True)
        return out.stdout.split("\n")[0]

    assert imported_after_open(0, 60) == "[] ['pandas', 'pyarrow.parquet']"  # 2.compact counts as large
    assert imported_after_open(1 << 20, 2) == "[] []"  # nothing in 2 s
