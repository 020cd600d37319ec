"""What a fresh commit overlaps (#14, commit overhead), and what it must still keep in order.

* the staged bytes are fsync'd while the WAL claim is written; the move then syncs only names;
* the bookkeeping records (offsets, sources, commit record) are written concurrently, after the
  manifest entry, and all of them before the WAL entry goes;
* a roll-forward still runs every step in WAL order.
"""

from __future__ import annotations

import os
import threading

import pytest

from streaming_exactly_once.storage.io_threads import io_pool
from streaming_exactly_once.storage.local import LocalStorage
from streaming_exactly_once.testing.faults import FaultInjectingStorage, InjectedFailure, Rule, Where

from .helpers import make_committer, stage_and_commit, visible_rows

QUERY = "5f0e3b8a-8c41-4d0e-9a55-3b2f4c1d2e6f"
CREATE = ("put_if_absent", "open_exclusive", "publish_prepared")


class RecordingStorage(LocalStorage):
    """Local disk that records the order of the calls these tests are about."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.calls: list[tuple[str, str, bool | None]] = []
        self._lock = threading.Lock()

    def _note(self, op: str, path: str, flag: bool | None = None) -> None:
        with self._lock:
            self.calls.append((op, path, flag))

    def sync(self, paths, *, contents=True):  # type: ignore[no-untyped-def]
        super().sync(paths, contents=contents)
        self._note("sync", paths[0] if paths else "", contents)

    def rename(self, src: str, dst: str) -> None:
        self._note("rename", src)
        super().rename(src, dst)

    def put_if_absent(self, path: str, data: bytes) -> None:
        super().put_if_absent(path, data)
        self._note("create", path)

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        self._note("delete", path)
        super().delete(path, missing_ok=missing_ok)


def test_staged_bytes_are_synced_before_the_moves_and_the_move_syncs_only_names(tmp_path):
    storage = RecordingStorage(str(tmp_path))
    committer = make_committer(storage)
    stage_and_commit(committer, QUERY, 0, [1, 2, 3, 4])
    calls = storage.calls
    staged_sync = [i for i, c in enumerate(calls) if c[0] == "sync" and c[1].startswith("_seo/staging/")]
    final_sync = [i for i, c in enumerate(calls) if c[0] == "sync" and c[1].startswith("p=a/")]
    renames = [i for i, c in enumerate(calls) if c[0] == "rename"]
    # the bytes once, then the names of the directories Spark made for them
    assert [calls[i][2] for i in staged_sync] == [True, False], calls
    assert len(final_sync) == 1 and calls[final_sync[0]][2] is False, calls  # names only
    assert staged_sync[-1] < renames[0] < renames[-1] < final_sync[0]
    manifest = next(i for i, c in enumerate(calls) if c[0] == "create" and c[1] == "_spark_metadata/0")
    assert final_sync[0] < manifest
    assert visible_rows(storage) == [1, 2, 3, 4]


def test_a_roll_forward_syncs_the_bytes_too(tmp_path):
    """After a crash the committer cannot know whether the staged bytes were synced."""
    inner = RecordingStorage(str(tmp_path))
    failing = make_committer(inner, fail_at="after-wal")
    with pytest.raises(InjectedFailure):
        stage_and_commit(failing, QUERY, 0, [1, 2])
    failing.close()
    inner.calls.clear()
    committer = make_committer(inner)
    report = committer.open()
    assert report.rolled_forward == [0]
    syncs = [c for c in inner.calls if c[0] == "sync"]
    assert syncs and all(flag is True for _, _, flag in syncs), syncs
    assert visible_rows(inner) == [1, 2]


def test_bookkeeping_records_are_written_concurrently_after_the_manifest(tmp_path):
    """Each of the three records waits at a barrier of three before it is created: written
    one after the other, the first would wait alone and the barrier would time out."""
    barrier = threading.Barrier(3, timeout=10)
    inner = RecordingStorage(str(tmp_path))
    wait = [Rule(Where(CREATE, rf"^_seo/{log}/1$", "before"), "call", callback=barrier.wait) for log in ("offsets", "sources", "commits")]
    storage = FaultInjectingStorage(inner, wait)
    committer = make_committer(storage)
    stage_and_commit(committer, QUERY, 0, [1])
    stage_and_commit(committer, QUERY, 1, [2])  # batch 1: the rules count from here
    assert not barrier.broken
    created = [c[1] for c in inner.calls if c[0] == "create"]
    manifest = created.index("_spark_metadata/1")
    for path in ("_seo/offsets/1", "_seo/sources/1", "_seo/commits/1"):
        assert created.index(path) > manifest, created
    committer.janitor.drain()  # the claim is dropped off the batch's path, after every record
    calls = [tuple(c[:2]) for c in inner.calls]
    assert calls.index(("delete", "_seo/wal/1")) > max(calls.index(("create", p)) for p in ("_seo/offsets/1", "_seo/sources/1", "_seo/commits/1"))
    assert visible_rows(inner) == [1, 2]


def test_a_failed_bookkeeping_record_lets_the_others_finish_keeps_the_claim_and_rolls_forward(tmp_path):
    inner = RecordingStorage(str(tmp_path))
    storage = FaultInjectingStorage(inner, [Rule(Where(CREATE, r"^_seo/sources/0$", "before"), "fail")])
    committer = make_committer(storage)
    with pytest.raises(InjectedFailure):
        stage_and_commit(committer, QUERY, 0, [7, 8])
    # the error came after every other record of the group was written: nothing still writing
    assert (tmp_path / "_seo" / "offsets" / "0").exists()
    assert (tmp_path / "_seo" / "commits" / "0").exists()
    assert not (tmp_path / "_seo" / "sources" / "0").exists()
    assert (tmp_path / "_seo" / "wal" / "0").exists(), "the claim stays until every record is written"
    committer.close()
    again = make_committer(inner)
    assert again.open().rolled_forward == [0]
    assert (tmp_path / "_seo" / "sources" / "0").exists()
    assert not (tmp_path / "_seo" / "wal" / "0").exists()
    assert stage_and_commit(again, QUERY, 0, [7, 8]) is None  # a replay is skipped
    assert visible_rows(inner) == [7, 8]


def test_the_commit_record_keeps_the_timings_of_the_steps_before_it(tmp_path):
    committer = make_committer(LocalStorage(str(tmp_path)))
    result = stage_and_commit(committer, QUERY, 0, [1])
    record = committer.logs.commits.record(0)
    assert record is not None and result is not None
    for step in ("wal", "move", "manifest"):
        assert step in record.step_ms
    for step in ("offsets", "sources", "commit"):  # the concurrent group: in the result only
        assert step in result.timings


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_pool_made_before_a_fork_works_in_the_child():
    assert io_pool("test-fork", 2).submit(lambda: 41).result() == 41
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads do not exist here
        code = 1
        try:
            code = 0 if io_pool("test-fork", 2).submit(lambda: 42).result(timeout=10) == 42 else 1
        finally:
            os._exit(code)  # never return into the test session
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_rebuild_logs_leaves_a_pending_batch_to_its_roll_forward(tmp_path):
    """A crash inside the group can leave the commit record without the offsets and sources
    records. ``seo recover --rebuild-logs`` must not rebuild those from the commit record (no
    input files, no source offsets): the WAL entry holds the real ones."""
    from streaming_exactly_once.maintenance.repair import rebuild_logs, recover_table

    inner = LocalStorage(str(tmp_path))
    fail = [Rule(Where(CREATE, rf"^_seo/{log}/0$", "before"), "fail") for log in ("offsets", "sources")]
    committer = make_committer(FaultInjectingStorage(inner, fail), step_retries=0)
    with pytest.raises(InjectedFailure):
        stage_and_commit(committer, QUERY, 0, [1, 2])
    committer.lease.release()
    assert (tmp_path / "_seo" / "commits" / "0").exists() and not (tmp_path / "_seo" / "sources" / "0").exists()
    report = rebuild_logs(inner, lease_timeout_ms=1_000)
    assert report.pending == [0] and report.sources == [] and report.offsets == []
    assert recover_table(inner, lease_timeout_ms=1_000).rolled_forward == [0]
    sources = make_committer(inner).logs.require_sources().read(0)
    assert [s.path for s in sources] == [f"file:///in/{QUERY[:4]}-0.csv"]  # the WAL's, not an empty rebuild


def test_a_table_whose_store_hangs_does_not_hold_up_another_tables_commits(tmp_path):
    """The committers live in one driver; two tables' bookkeeping writes hang (a stuck mount),
    which would hold every thread of a pool shared by the process."""
    release = threading.Event()
    workers = []
    for name in ("a", "c"):
        hang = [Rule(Where(CREATE, rf"^_seo/{log}/1$", "before"), "call", callback=lambda: release.wait(30)) for log in ("sources", "commits")]
        stuck = make_committer(FaultInjectingStorage(LocalStorage(str(tmp_path / name)), hang))
        stage_and_commit(stuck, QUERY, 0, [1])
        workers.append(threading.Thread(target=stage_and_commit, args=(stuck, QUERY, 1, [2]), daemon=True))
        workers[-1].start()
    try:
        healthy = make_committer(LocalStorage(str(tmp_path / "b")))
        done = threading.Event()
        threading.Thread(target=lambda: [stage_and_commit(healthy, QUERY, b, [b]) for b in range(6)] and done.set(), daemon=True).start()
        assert done.wait(20), "the healthy table's commits waited for the hung one"
    finally:
        release.set()
        for worker in workers:
            worker.join(30)


def test_work_submitted_to_a_pool_that_takes_no_more_runs_here():
    from concurrent.futures import ThreadPoolExecutor

    from streaming_exactly_once.storage.io_threads import submit_or_run

    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    assert submit_or_run(pool, lambda x: x + 1, 41).result() == 42
    failed = submit_or_run(pool, lambda: 1 / 0)
    assert isinstance(failed.exception(), ZeroDivisionError)


# -- the move step asks the rename, not a stat, whether a file was moved already ----------------


def _move_ctx(storage):
    from streaming_exactly_once.commit.protocol.step import StepContext

    return StepContext(storage=storage, logs=None, move_threads=1)  # type: ignore[arg-type]


def _staged(root, name: str, data: bytes) -> str:
    path = root / "_seo" / "staging" / "a1" / "data" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"_seo/staging/a1/data/{name}"


def test_a_roll_forward_of_moves_half_done_finishes_them_and_checks_what_it_finds(tmp_path):
    """A crash mid-move leaves: a file moved (source gone), a file linked but its source not yet
    unlinked (the link fallback), a file not moved. The roll-forward finishes the last and
    accepts the first two, because each target holds the recorded size."""
    from streaming_exactly_once.commit.protocol.steps import FileMove, MoveFiles

    storage = LocalStorage(str(tmp_path))
    moves = [FileMove(_staged(tmp_path, f"f{i}", b"x" * (10 + i)), f"day=1/f{i}", 10 + i) for i in range(3)]
    (tmp_path / "day=1").mkdir()
    os.rename(tmp_path / moves[0].src, tmp_path / moves[0].dst)
    os.link(tmp_path / moves[1].src, tmp_path / moves[1].dst)
    MoveFiles(moves=moves).execute(_move_ctx(storage))
    assert [(tmp_path / m.dst).read_bytes() for m in moves] == [b"x" * (10 + i) for i in range(3)]
    assert not (tmp_path / moves[2].src).exists()


def test_a_move_onto_a_different_file_stops_and_overwrites_nothing(tmp_path):
    from streaming_exactly_once.commit.protocol.steps import FileMove, MoveFiles
    from streaming_exactly_once.errors import CommitError

    storage = LocalStorage(str(tmp_path))
    move = FileMove(_staged(tmp_path, "f", b"ours"), "day=1/f", 4)
    (tmp_path / "day=1").mkdir()
    (tmp_path / "day=1" / "f").write_bytes(b"someone else's")
    with pytest.raises(CommitError, match=r"day=1/f exists with 14 bytes, expected 4") as raised:
        MoveFiles(moves=[move]).execute(_move_ctx(storage))
    assert "move it aside" in str(raised.value)
    assert (tmp_path / "day=1" / "f").read_bytes() == b"someone else's"
    assert (tmp_path / move.src).read_bytes() == b"ours"


def test_a_move_whose_source_and_target_are_both_gone_names_the_lost_file(tmp_path):
    from streaming_exactly_once.commit.protocol.steps import FileMove, MoveFiles
    from streaming_exactly_once.errors import CommitError

    storage = LocalStorage(str(tmp_path))
    move = FileMove("_seo/staging/a1/data/gone", "day=1/gone", 4)
    with pytest.raises(CommitError, match=r"staged file .*gone is gone and its target .*day=1/gone does not exist"):
        MoveFiles(moves=[move]).execute(_move_ctx(storage))


class SlowStagingCleanup(LocalStorage):
    """Local disk whose first staging-tree delete waits for a signal (an object store's slow
    delete), and which notes, at every deletion of a log file of batch N, which WAL claims
    of batches <= N were still there."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.release = threading.Event()
        self.blocked = False
        self.violations: list[tuple[str, list[str]]] = []

    def delete_tree(self, path: str) -> None:
        if path.startswith("_seo/staging/") and not path.endswith("/intents") and not self.blocked:
            self.blocked = True
            assert self.release.wait(20)
        super().delete_tree(path)

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        head, _, name = path.rpartition("/")
        if head in ("_spark_metadata", "_seo/commits") and name.split(".")[0].isdigit():
            batch = int(name.split(".")[0])
            claims = [e.name for e in self.list_dir("_seo/wal") if e.name.isdigit() and int(e.name) <= batch]
            if claims:
                self.violations.append((path, claims))
        super().delete(path, missing_ok=missing_ok)


@pytest.mark.parametrize("mode", ["direct", "rename"])
def test_retention_never_deletes_the_files_of_a_batch_whose_claim_lingers(tmp_path, mode):
    """Red team of the claim dropped off the batch's path: the janitor stuck on one staging
    delete while batches go on, then a retention pass with the newest batch's window. Had it
    deleted ``_spark_metadata/1`` with ``_seo/wal/1`` still there, a crash would have left a
    claim recovery takes for never published - in direct mode deleting its published files."""
    storage = SlowStagingCleanup(str(tmp_path))
    committer = make_committer(storage, compact_interval=2, min_batches_to_retain=1, cleanup_delay_ms=0)
    for b in range(7):
        stage_and_commit(committer, QUERY, b, [b * 10, b * 10 + 1], mode=mode)
    assert storage.blocked and len(os.listdir(tmp_path / "_seo" / "wal")) >= 5  # the claims wait in the queue
    storage.release.set()
    committer.janitor.drain()
    assert not (tmp_path / "_spark_metadata" / "1").exists(), "retention ran"
    assert storage.violations == []
    assert os.listdir(tmp_path / "_seo" / "wal") == []
    committer.close()
    again = make_committer(storage, compact_interval=2, min_batches_to_retain=1, cleanup_delay_ms=0)
    report = again.open()
    assert report.discarded == [] and report.deleted_data_files == 0
    assert visible_rows(storage) == sorted(r for b in range(7) for r in (b * 10, b * 10 + 1))


class CancelledOnce(LocalStorage):
    """Local disk whose first delete of a WAL claim raises a BaseException, as a cancelled
    async object-store client does."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.raised = False

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        if path.startswith("_seo/wal/") and not self.raised:
            self.raised = True
            raise KeyboardInterrupt("cancelled")  # a BaseException, not an Exception
        super().delete(path, missing_ok=missing_ok)


def test_a_claim_whose_delete_is_cancelled_stays_ahead_of_retention(tmp_path):
    """Red team of d5b7422: a BaseException while claims were dropped lost them from memory (and
    killed the janitor's thread, so drain hung); retention then deleted the log files of batches
    whose claims were still on disk."""
    storage = CancelledOnce(str(tmp_path))
    opts = dict(compact_interval=2, min_batches_to_retain=1, cleanup_delay_ms=0)
    committer = make_committer(storage, **opts)
    for b in range(7):
        stage_and_commit(committer, QUERY, b, [b * 10], mode="direct")
    committer.janitor.drain()  # returns: the lane's thread survived
    assert storage.raised and os.listdir(tmp_path / "_seo" / "wal") == []
    committer.close()
    report = make_committer(storage, **opts).open()
    assert report.discarded == [] and report.deleted_data_files == 0
    assert visible_rows(storage) == [b * 10 for b in range(7)]


class NotingDurability(LocalStorage):
    """Local disk that notes, for every create, whether it waited for the disk, and every sync
    with all its paths; ``fail_syncs_of`` (a path prefix): such syncs raise, as a failing disk."""

    def __init__(self, root: str, fail_syncs_of: str | None = None) -> None:
        super().__init__(root)
        self.events: list[tuple[str, str, bool]] = []
        self.fail_syncs_of = fail_syncs_of
        self._lock = threading.Lock()

    def put_if_absent(self, path: str, data: bytes) -> None:
        super().put_if_absent(path, data)
        with self._lock:
            self.events.append(("create", path, self._durable))

    def sync(self, paths, *, contents=True):  # type: ignore[no-untyped-def]
        if self.fail_syncs_of and any(p.startswith(self.fail_syncs_of) for p in paths):
            raise OSError(5, "Input/output error (injected)")
        super().sync(paths, contents=contents)
        with self._lock:
            self.events.extend(("sync", p, self._durable) for p in paths)

    def atomic_write(self, path: str, data: bytes) -> None:
        if self.fail_syncs_of and path.startswith(self.fail_syncs_of):
            raise OSError(5, "Input/output error (injected)")
        super().atomic_write(path, data)

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        with self._lock:
            self.events.append(("delete", path, self._durable))
        super().delete(path, missing_ok=missing_ok)


def test_offsets_and_sources_are_written_without_waiting_and_synced_before_the_claim_goes(tmp_path):
    """#14 goal 2: of the bookkeeping records only the commit record waits for the disk; the
    other two are made durable by the janitor before it deletes the claim that can rebuild them."""
    storage = NotingDurability(str(tmp_path))
    committer = make_committer(storage, compact_interval=10)
    for b in range(3):
        stage_and_commit(committer, QUERY, b, [b])
    committer.janitor.drain()
    events = storage.events
    created = {path: durable for op, path, durable in events if op == "create"}
    for b in range(3):
        assert created[f"_seo/offsets/{b}"] is False and created[f"_seo/sources/{b}"] is False, created
        assert created[f"_seo/commits/{b}"] is True and created[f"_spark_metadata/{b}"] is True
        assert created[f"_seo/wal/{b}"] is True
        drop = events.index(("delete", f"_seo/wal/{b}", True))
        for log in ("offsets", "sources"):
            synced = [i for i, e in enumerate(events) if e == ("sync", f"_seo/{log}/{b}", True)]
            assert synced and synced[0] < drop, (log, b, events)
    assert visible_rows(storage) == [0, 1, 2]


def test_records_a_power_cut_tore_before_their_sync_are_rewritten_by_the_roll_forward(tmp_path):
    """The sync of the deferred records fails, and so does writing them again (a dying disk), so
    every claim stays and retention
    waits; the records are then cut as a power cut leaves unsynced files - gone, empty, cut
    mid-line, a line short, NUL-filled - and the next writer's roll-forward rewrites them."""
    opts = dict(compact_interval=10, min_batches_to_retain=1, cleanup_delay_ms=0)
    storage = NotingDurability(str(tmp_path), fail_syncs_of="_seo/offsets/")
    committer = make_committer(storage, **opts)
    for b in range(5):
        stage_and_commit(committer, QUERY, b, [b * 10, b * 10 + 1])
    committer.janitor.drain()
    assert sorted(os.listdir(tmp_path / "_seo" / "wal")) == ["0", "1", "2", "3", "4"], "no claim goes before its records are synced"
    assert (tmp_path / "_spark_metadata" / "0").exists(), "retention waits for the claims"
    committer.close()
    seo = tmp_path / "_seo"
    intact = {p: p.read_bytes() for p in [*(seo / "offsets").iterdir(), *(seo / "sources").iterdir()] if p.name.isdigit()}
    (seo / "offsets" / "0").unlink()
    (seo / "sources" / "1").write_bytes(b"")
    (seo / "offsets" / "2").write_bytes(intact[seo / "offsets" / "2"][:-7])
    (seo / "sources" / "3").write_bytes(b"v1")  # its one line lost
    (seo / "offsets" / "4").write_bytes(b"\0" * len(intact[seo / "offsets" / "4"]))
    again = make_committer(LocalStorage(str(tmp_path)), **opts)
    report = again.open()
    assert report.rolled_forward == [0, 1, 2, 3, 4] and report.discarded == []
    assert {p: p.read_bytes() for p in intact} == intact
    assert os.listdir(seo / "wal") == []
    for b in range(5):
        assert stage_and_commit(again, QUERY, b, [b * 10, b * 10 + 1]) is None  # replays are skipped
    stage_and_commit(again, QUERY, 5, [50, 51])
    again.close()
    assert visible_rows(storage) == sorted(r for b in range(6) for r in (b * 10, b * 10 + 1))


def test_a_record_holding_another_batchs_records_is_a_conflict_not_a_tear(tmp_path):
    """Only a cut-short write of the claim's own records is rewritten: complete other records
    are someone else's, and the roll-forward stops with the file named."""
    from streaming_exactly_once.errors import LogConflictError

    storage = NotingDurability(str(tmp_path), fail_syncs_of="_seo/offsets/")
    committer = make_committer(storage)
    stage_and_commit(committer, QUERY, 0, [1])
    stage_and_commit(committer, QUERY, 1, [2])
    committer.close()
    sources = tmp_path / "_seo" / "sources"
    (sources / "1").write_bytes((sources / "0").read_bytes())  # batch 0's complete record
    with pytest.raises(LogConflictError, match=r"_seo/sources/1"):
        make_committer(LocalStorage(str(tmp_path))).open()
    assert (tmp_path / "_seo" / "wal" / "1").exists(), "the claim stays for a person to look at"


class FailingFirstSyncs(NotingDurability):
    """``NotingDurability`` whose first ``failures`` syncs of ``_seo/offsets/`` fail, and which
    notes every ``atomic_write``."""

    def __init__(self, root: str, failures: int) -> None:
        super().__init__(root)
        self.failures = failures

    def sync(self, paths, *, contents=True):  # type: ignore[no-untyped-def]
        if self.failures and any(p.startswith("_seo/offsets/") for p in paths):
            self.failures -= 1
            raise OSError(5, "Input/output error (injected)")
        super().sync(paths, contents=contents)

    def atomic_write(self, path: str, data: bytes) -> None:
        super().atomic_write(path, data)
        with self._lock:
            self.events.append(("rewrite", path, self._durable))


def test_records_whose_sync_failed_are_written_again_not_synced_again(tmp_path):
    """Red team of ce20f30 ("fsyncgate"): Linux marks the pages of a failed fsync clean, so a
    second fsync can succeed with the bytes never on disk. The claim goes only after the
    records were written again, durably, under a new inode."""
    storage = FailingFirstSyncs(str(tmp_path), failures=1)
    committer = make_committer(storage)
    stage_and_commit(committer, QUERY, 0, [1])
    committer.janitor.drain()
    events = storage.events
    drop = events.index(("delete", "_seo/wal/0", True))
    for log in ("offsets", "sources"):
        rewritten = events.index(("rewrite", f"_seo/{log}/0", True))
        assert rewritten < drop, events
        assert ("sync", f"_seo/{log}/0", True) not in events[:drop], "never trusted to a second fsync"
    committer.close()
    assert visible_rows(storage) == [1]


def test_a_roll_forward_writes_the_deferred_records_again_before_it_deletes_the_claim(tmp_path):
    storage = NotingDurability(str(tmp_path), fail_syncs_of="_seo/offsets/")
    committer = make_committer(storage)
    stage_and_commit(committer, QUERY, 0, [1])
    committer.close()
    again = FailingFirstSyncs(str(tmp_path), failures=0)
    assert make_committer(again).open().rolled_forward == [0]
    events = again.events
    drop = events.index(("delete", "_seo/wal/0", True))
    assert events.index(("rewrite", "_seo/offsets/0", True)) < drop and events.index(("rewrite", "_seo/sources/0", True)) < drop
    assert events.index(("sync", "_spark_metadata/0", True)) < drop and events.index(("sync", "_seo/commits/0", True)) < drop


def test_the_unsynced_twin_still_makes_new_directories_durable(tmp_path, monkeypatch):
    """Red team of ce20f30: the sync of a record covers its name in its directory, not the new
    directory's name in its parent."""
    import streaming_exactly_once.storage.local as local

    synced: list[str] = []
    real = local._fsync_dir
    monkeypatch.setattr(local, "_fsync_dir", lambda path: (synced.append(path), real(path)))
    LocalStorage(str(tmp_path)).without_sync().put_if_absent("_seo/sources/0", b"v1")
    assert str(tmp_path / "_seo") in synced and str(tmp_path) in synced
    assert str(tmp_path / "_seo" / "sources") not in synced, "the file's own name waits for its sync"
