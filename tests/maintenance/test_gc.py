"""``seo gc`` deletes garbage only: never a committed file, never a file of a pending commit, never
anything while a writer could commit, and nothing at all on a table that readers refuse.

The reproducers of the commit-protocol review (r18, r05, r05b, r05c, r09) as tests: real tables
on disk written through the commit protocol, real files aged with ``os.utime``, gc run in-process
and through the ``seo`` command.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import streaming_exactly_once.maintenance.gc as gcmod
from streaming_exactly_once import read
from streaming_exactly_once.commit.protocol.lease import Lease, read_lease_state
from streaming_exactly_once.errors import ConcurrentWriterError, ExactlyOnceError, GcRefusedError, WriterFencedError
from streaming_exactly_once.maintenance.gc import collect_garbage
from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import InjectedFailure
from tests.cli.test_cli import seo
from tests.readers.tables import age, commit_batch, committer, parquet_bytes, retired, rows_of, stage, write_group, write_table
from tests.readers.test_table_roots import written_through_both_spellings


def data_files(root: Path) -> set[str]:
    """Every file a reader could be pointed at: outside hidden directories."""
    out = set()
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        out.update(os.path.relpath(os.path.join(dirpath, n), root) for n in names if not n.startswith(("_", ".")))
    return out


def ids(path) -> list[int]:
    return sorted(read.arrow(str(path)).column("id").to_pylist())


# --- r18: dataset groups ---------------------------------------------------------------------


def test_gc_on_a_group_root_collects_each_table_against_its_own_manifest(capsys, tmp_path):
    """r18: gc of a group root read <root>/_spark_metadata (there is none) and deleted every
    committed file of every table."""
    root = tmp_path / "lake"
    write_group(str(root), {"orders": [1, 2], "payments": [3], "by_topic/a~2Fb": [4]})
    committed = data_files(root)
    retired(root / "orders", "day=1/orphan.parquet", parquet_bytes([99]))
    (root / "orders" / "day=1" / "foreign.parquet").write_bytes(parquet_bytes([98]))  # no record: another tool's
    (root / "notes").mkdir()
    (root / "notes" / "readme.parquet").write_bytes(b"not the group's")  # not a table of the group
    stale = root / "_seo" / "staging" / "7-deadbeef" / "data" / "orders"
    stale.mkdir(parents=True)
    (stale / "x.parquet").write_bytes(b"x")
    age(str(root))
    code, out, err = seo(capsys, "gc", "--dry-run", str(root))
    assert code == 0, err
    assert "orders/day=1/orphan.parquet" in out and out.count("would delete file") == 1 and "in 3 tables" in out
    assert "kept foreign file" in out and "orders/day=1/foreign.parquet" in out
    code, out, err = seo(capsys, "gc", str(root))
    assert code == 0, err
    assert "deleted 1 orphan files" in out and "staging" in out
    assert data_files(root) == committed | {"notes/readme.parquet", "orders/day=1/foreign.parquet"}
    assert not (root / "orders" / "_seo" / "retired").exists() or not os.listdir(root / "orders" / "_seo" / "retired")
    assert not stale.exists()
    assert ids(root / "orders") == [1, 2] and ids(root / "payments") == [3] and ids(root / "by_topic" / "a~2Fb") == [4]


def test_gc_on_a_group_member_uses_the_groups_lease_and_wal(tmp_path):
    root = tmp_path / "lake"
    write_group(str(root), {"orders": [1, 2], "payments": [3]})
    retired(root / "orders", "day=1/orphan.parquet", parquet_bytes([99]))
    retired(root / "payments", "day=1/orphan.parquet", parquet_bytes([98]))
    age(str(root))
    lease = Lease(open_storage(str(root)), description="events-ingest")  # the group's writer
    lease.acquire()
    with pytest.raises(ConcurrentWriterError, match="stop the query"):
        collect_garbage(open_storage(str(root / "orders")))
    lease.release()
    assert not (root / "orders" / "_seo" / "epochs").exists()  # members have no lease of their own
    report = collect_garbage(open_storage(str(root / "orders")))
    assert [u.rsplit("/", 3)[-3:] for u, _ in report.orphans] == [["orders", "day=1", "orphan.parquet"]]
    assert (root / "payments" / "day=1" / "orphan.parquet").exists()  # another table: not collected
    assert ids(root / "orders") == [1, 2]
    assert read_lease_state(open_storage(str(root))).reason == "released"


# --- r05: pending commits ----------------------------------------------------------------------


@pytest.mark.parametrize("mode, fail_at", [("rename", "after-move@2"), ("direct", "after-wal@2")])
def test_gc_keeps_every_file_of_a_pending_commit(capsys, tmp_path, mode, fail_at):
    """r05: a commit interrupted after its WAL write (files moved into the table, no manifest
    yet) has data files in the table that no manifest names; gc deleted them and recovery could
    no longer complete the batch."""
    root = tmp_path / "t"
    c = committer(str(root), fail_at=fail_at)
    commit_batch(c, 0, rows_of(0), mode=mode)
    with pytest.raises(InjectedFailure):
        commit_batch(c, 1, rows_of(1), mode=mode)
    c.close()
    assert os.listdir(root / "_seo" / "wal") == ["1"]
    age(str(root))
    code, out, err = seo(capsys, "verify", str(root))
    assert "orphan" not in out, out  # files of a pending commit are no orphans
    code, out, err = seo(capsys, "gc", str(root))
    assert code == 0, err
    assert "deleted 0 orphan files" in out and "pending commit(s) 1" in out
    code, out, err = seo(capsys, "recover", str(root))
    assert code == 0, err
    assert ids(root) == rows_of(0) + rows_of(1)
    code, out, _ = seo(capsys, "verify", str(root))
    assert code == 0, out


# --- r05b: gc and a writer ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_gc_refuses_while_a_writer_holds_the_lease(capsys, tmp_path, mode):
    """r05b: gc snapshotted the manifest, a batch committed, gc deleted its (old) files."""
    root = tmp_path / "t"
    c = committer(str(root))
    commit_batch(c, 0, rows_of(0), mode=mode)
    attempt = c.begin("77777777-7777-7777-7777-777777777777", 1, mode=mode)
    files = stage(c, attempt, rows_of(1), mode=mode)
    age(str(root), 90 * 60)  # a long Spark stage: written 90 minutes before the commit
    before = data_files(root)
    code, _, err = seo(capsys, "gc", str(root))
    assert code == 1 and "stop the query" in err and err.count("\n") == 1, err
    code, out, err = seo(capsys, "gc", "--dry-run", str(root))  # read-only: a preview beside the live writer
    assert code == 0 and "a writer is live" in out, out + err
    assert data_files(root) == before
    result = c.commit(attempt, [type(f)(f.final, f.size, int((time.time() - 5400) * 1000), f.staged) for f in files], num_rows=10)
    assert result.status == "committed"
    c.close()
    assert collect_garbage(open_storage(str(root))).orphans == []
    assert ids(root) == rows_of(0) + rows_of(1)


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_a_writer_that_lost_its_lease_to_gc_publishes_nothing(tmp_path, monkeypatch, mode):
    """The exact interleaving of r05b, with a writer whose lease expired: the commit lands right
    after gc planned its deletions - and is fenced, because gc holds the lease."""
    root = tmp_path / "t"
    c = committer(str(root), timeout_ms=1)
    commit_batch(c, 0, rows_of(0), mode=mode)
    attempt = c.begin("77777777-7777-7777-7777-777777777777", 1, mode=mode)
    files = stage(c, attempt, rows_of(1), mode=mode)
    age(str(root), 90 * 60)
    time.sleep(0.05)  # the writer's lease expires (1 ms, no heartbeat)
    outcome = {}
    plan_table = gcmod.kept_files

    def commit_meanwhile(*args, **kwargs):
        kept = plan_table(*args, **kwargs)
        try:
            c.commit(attempt, files, num_rows=10)
        except WriterFencedError as exc:
            outcome["fenced"] = exc
        return kept

    monkeypatch.setattr(gcmod, "kept_files", commit_meanwhile)
    collect_garbage(open_storage(str(root)))
    assert "fenced" in outcome
    assert ids(root) == rows_of(0)  # batch 1 never became visible, batch 0 is whole
    assert ManifestLog(open_storage(str(root))).latest_batch_id() == 0


def test_gc_releases_the_lease_and_a_writer_starts_after_it(tmp_path):
    root = tmp_path / "t"
    write_table(str(root))
    collect_garbage(open_storage(str(root)))
    state = read_lease_state(open_storage(str(root)))
    assert state.reason == "released" and state.writer.description == "seo gc"
    c = committer(str(root))
    commit_batch(c, 2, rows_of(2))
    c.close()
    assert ids(root) == rows_of(0) + rows_of(1) + rows_of(2)


# --- r05c: tables readers refuse -----------------------------------------------------------------


def _delete_manifest(root: Path, name: str) -> bytes:
    path = root / "_spark_metadata" / name
    data = path.read_bytes()
    path.unlink()
    return data


def _outside_entry(root: Path) -> None:
    log = ManifestLog(open_storage(str(root)))
    log.add(log.latest_batch_id(refresh=True) + 1, [ManifestEntry.for_file(f"file://{root.parent}/elsewhere/x.parquet", size=3, modification_time=1)])


def _stray(root: Path) -> None:
    (root / "_spark_metadata" / "100000000000").write_text("v1")


@pytest.mark.parametrize("damage", ["latest-manifest-deleted", "middle-manifest-deleted", "outside-entry", "stray-file", "corrupt-wal"])
def test_gc_deletes_nothing_on_a_table_readers_refuse(capsys, tmp_path, damage):
    """r05c: with the latest manifest file deleted readers refuse the table, but gc deleted that
    batch's files - so restoring the manifest file from a backup no longer helped."""
    root = tmp_path / "t"
    write_table(str(root), batches=4, compact_interval=10)
    (root / "p=a" / "orphan.parquet").write_bytes(parquet_bytes([99]))
    age(str(root))
    saved = None
    if damage == "latest-manifest-deleted":
        saved = ("3", _delete_manifest(root, "3"))
    elif damage == "middle-manifest-deleted":
        saved = ("1", _delete_manifest(root, "1"))
    elif damage == "outside-entry":
        _outside_entry(root)
    elif damage == "stray-file":
        _stray(root)
    else:
        (root / "_seo" / "wal").mkdir(exist_ok=True)
        (root / "_seo" / "wal" / "4").write_bytes(b"v1\n{not json")
    before = data_files(root)
    with pytest.raises(GcRefusedError, match="deleted nothing") as err:
        collect_garbage(open_storage(str(root)))
    assert isinstance(err.value, ExactlyOnceError)
    code, _, stderr = seo(capsys, "gc", str(root))
    assert code == 1 and stderr.startswith("error: seo gc deleted nothing") and stderr.count("\n") == 1, stderr
    assert data_files(root) == before
    assert read_lease_state(open_storage(str(root))).reason == "released"
    if saved is not None:
        (root / "_spark_metadata" / saved[0]).write_bytes(saved[1])  # the operator restores it, as told
        assert ids(root) == [r for b in range(4) for r in rows_of(b)]


# --- r09: several roots ----------------------------------------------------------------------------


def test_gc_keeps_files_written_under_every_root_of_the_table(capsys, tmp_path):
    """r09: written through a symlink and through the real path, or moved and written at the new
    place: gc deleted every committed file written under the root _seo/table did not record."""
    real = tmp_path / "disk1" / "events"
    real.mkdir(parents=True)
    link = tmp_path / "events"
    link.symlink_to(real)
    written_through_both_spellings(link, real)
    age(str(real))
    for spelling in (link, real):
        code, out, err = seo(capsys, "gc", str(spelling))
        assert code == 0 and "deleted 0 orphan files" in out, out + err
    assert ids(link) == ids(real) == rows_of(0) + rows_of(1)

    moved_from, moved_to = tmp_path / "old" / "t", tmp_path / "new" / "t"
    write_table(str(moved_from), batches=1)
    moved_to.parent.mkdir()
    shutil.move(str(moved_from), str(moved_to))
    c = committer(str(moved_to))
    commit_batch(c, 1, rows_of(1))
    c.close()
    age(str(moved_to))
    code, out, err = seo(capsys, "gc", str(moved_to))
    assert code == 0 and "deleted 0 orphan files" in out, out + err
    assert ids(moved_to) == rows_of(0) + rows_of(1)


# --- red team #14 G6: temp and work files of killed writers ---------------------------------------

Q = "55555555-5555-5555-5555-555555555555"

_SLOW_COPY_CHILD = """
import os, sys, time
sys.path.insert(0, {repo!r})
from streaming_exactly_once.log.compactible_log import CompactibleLog
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer, stage_and_commit
CompactibleLog.copy_threshold = 0  # the previous compact file is copied by the kernel, however small
real = os.copy_file_range
def slow(*args):
    print("copying", flush=True)
    time.sleep(60)
    return real(*args)
os.copy_file_range = slow
c = make_committer(open_storage({root!r}), compact_interval=3, prepare_compactions=False, timeout_ms=1000)
stage_and_commit(c, {query!r}, 5, [50, 51])
"""


def _hidden_leftovers(root: Path) -> list[str]:
    """Temp (``.<name>.<uuid>.tmp``) and work (``.prep``) files anywhere in the metadata directories."""
    found = []
    for top in ("_spark_metadata", "_seo"):
        for dirpath, dirs, names in os.walk(root / top):
            dirs[:] = [d for d in dirs if d != "staging"]
            found += [os.path.relpath(os.path.join(dirpath, n), root) for n in names if n.startswith(".") and n.endswith((".tmp", ".prep"))]
    return sorted(found)


def test_temp_files_of_a_writer_killed_mid_compaction_are_removed_by_the_next_writer_and_gc(capsys, tmp_path):
    """Red team #14 G6 (a4): a compaction SIGKILLed while it copies the previous compact file
    leaves ``.5.compact.<uuid>.tmp`` in ``_spark_metadata``; the next writer removes it when it
    takes the table over, and ``seo gc`` removes the work file of the next compaction that the
    last writer's clean stop leaves. Afterwards nothing hidden is left, ``seo verify`` is clean
    and every batch reads."""
    import subprocess
    import sys

    from streaming_exactly_once.log.compactible_log import CompactibleLog
    from tests.commit.helpers import make_committer, stage_and_commit

    root = tmp_path / "t"
    storage = open_storage(str(root))
    c = make_committer(storage, compact_interval=3, prepare_compactions=False)
    for b in range(5):
        stage_and_commit(c, Q, b, [b * 10, b * 10 + 1])
    c.close()
    repo = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_COPY_CHILD.format(repo=repo, root=str(root), query=Q)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": repo},
    )
    try:
        assert child.stdout.readline().strip() == "copying"
    finally:
        child.kill()
        child.wait(30)
    killed = _hidden_leftovers(root)
    assert [p for p in killed if p.startswith("_spark_metadata/.5.compact.") and p.endswith(".tmp")], killed
    code, out, _ = seo(capsys, "verify", str(root))
    assert "/_spark_metadata/.5.compact." in out and " 0 errors" in out, out  # named as a leftover, not an error

    time.sleep(1.2)  # the killed writer's lease times out (its pid is gone, but be sure)
    c = make_committer(storage, compact_interval=3, timeout_ms=1000)
    report = c.open()
    assert [p for p in report.removed_temp_files if ".5.compact." in p] and not report.clean
    assert not [p for p in _hidden_leftovers(root) if p in killed]  # gone at take-over
    CompactibleLog.copy_threshold, threshold = 0, CompactibleLog.copy_threshold
    try:
        for b in range(5, 7):
            stage_and_commit(c, Q, b, [b * 10, b * 10 + 1])
    finally:
        CompactibleLog.copy_threshold = threshold
    c.close()
    left = _hidden_leftovers(root)
    assert left == []  # a clean close removes its own work file too

    code, out, err = seo(capsys, "gc", str(root), "--older-than", "0s")
    assert code == 0, err
    assert all(f"deleted temp file {storage.uri(p)}" in out for p in left), out
    assert _hidden_leftovers(root) == []
    code, out, err = seo(capsys, "verify", str(root))
    assert code == 0 and "0 errors, 0 warnings" in out, out + err
    log = ManifestLog(storage)
    assert log.latest_batch_id(refresh=True) == 6
    for as_of in range(log.valid_batches()[0], 7):
        files = read.files(str(root), as_of=as_of)
        rows = sorted(int(x) for uri in files for x in open_storage(str(root)).read_bytes(uri[len(storage.root_uri) + 1 :]).decode().split(","))
        assert rows == sorted(b * 10 + i for b in range(as_of + 1) for i in range(2)), as_of


def test_a_writer_removes_only_dead_temp_files_when_it_takes_over(tmp_path):
    """What the new writer removes: hidden temp and work files last written before its own
    epoch file - never its own lease files' temp siblings, never a file written after it took
    the table, never anything not hidden or in a data or staging directory."""
    from streaming_exactly_once.table.layout import EPOCHS_DIR, HEARTBEATS_DIR
    from tests.commit.helpers import make_committer, stage_and_commit

    root = tmp_path / "t"
    storage = open_storage(str(root))
    c = make_committer(storage, compact_interval=3)
    for b in range(2):
        stage_and_commit(c, Q, b, [b])
    c.close()
    old = {
        "_spark_metadata/.2.compact.0123456789abcdef0123456789abcdef.tmp": True,
        "_seo/commits/.2.compact.0123456789abcdef0123456789abcdef.tmp": True,
        "_seo/.table.0123456789abcdef0123456789abcdef.tmp": True,
        "_seo/manifest-index/.2.parquet.0123456789abcdef0123456789abcdef.tmp": True,
        "_seo/sources/.5.compact.e1.prep": True,
        "_seo/ledger/.2.0123456789abcdef0123456789abcdef.tmp": True,  # beside a ledger file per batch
        "_spark_metadata/.5.compact.prep": True,  # an earlier build's work file (no owner)
        "_spark_metadata/.notes.txt": False,  # hidden, but neither a temp nor a work file
        "_spark_metadata/.2.compact.not-a-uuid.tmp": False,
        "p=a/.part-9.txt.0123456789abcdef0123456789abcdef.tmp": False,  # a data directory
        "_seo/staging/9-abc-e1/intents/.x.0123456789abcdef0123456789abcdef.tmp": False,  # recovery's, with its attempt
    }
    for path in old:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x")
    age(str(root / "_seo" / "staging"), 7200)
    for path in old:
        os.utime(root / path, (time.time() - 7200,) * 2)
    c = make_committer(storage, compact_interval=3)
    c.lease.acquire()  # the lease is taken first; whatever this writer writes from here on is younger
    epoch = c.lease.epoch
    own = {
        f"{HEARTBEATS_DIR}/.{epoch}.0123456789abcdef0123456789abcdef.tmp",  # its heartbeat, being written
        f"{EPOCHS_DIR}/.{epoch}.0123456789abcdef0123456789abcdef.tmp",
    }
    for path in own:
        (root / path).write_bytes(b"x")
        os.utime(root / path, (time.time() - 7200,) * 2)  # whatever the clock said
    young = "_seo/offsets/.3.0123456789abcdef0123456789abcdef.tmp"  # written after the lease was taken
    (root / young).write_bytes(b"x")
    os.utime(root / young, (time.time() + 5,) * 2)
    report = c.open()
    removed = {p for p, dead in old.items() if dead}
    # (the work files go already when the writer discards every work file at start-up)
    assert sorted(report.removed_temp_files) == sorted(storage.uri(p) for p in removed if p.endswith(".tmp"))
    assert all(not (root / p).exists() for p in removed)
    assert all((root / p).exists() for p, dead in old.items() if not dead and "staging" not in p)
    assert all((root / p).exists() for p in own) and (root / young).exists()
    c.close()


def test_a_fenced_writer_whose_temp_file_was_removed_fails_and_publishes_nothing(tmp_path):
    """A zombie mid-write when the new writer takes over: its temp file is older than the new
    epoch, so it is removed; the zombie's no-replace rename then fails - it never publishes."""
    from tests.commit.helpers import make_committer, stage_and_commit

    root = tmp_path / "t"
    storage = open_storage(str(root))
    c = make_committer(storage, compact_interval=3, timeout_ms=50)
    stage_and_commit(c, Q, 0, [0])
    with pytest.raises(FileNotFoundError):
        with storage.open_exclusive("_spark_metadata/7") as fh:  # the zombie's write, cut off by a pause
            fh.write(b"v1\n")
            tmp = [p for p in _hidden_leftovers(root) if p.startswith("_spark_metadata/.7.")]
            assert tmp
            os.utime(root / tmp[0], (time.time() - 60,) * 2)
            time.sleep(0.1)
            successor = make_committer(open_storage(str(root)), compact_interval=3)
            report = successor.open()  # takes over (c's lease timed out: no heartbeat) and cleans up
            assert storage.uri(tmp[0]) in report.removed_temp_files
            fh.write(b'{"path":"x"}')
    assert not (root / "_spark_metadata" / "7").exists()
    successor.close()


def test_gc_removes_only_temp_files_older_than_its_threshold(tmp_path):
    root = tmp_path / "t"
    write_table(str(root))
    storage = open_storage(str(root))
    old, young = "_spark_metadata/.3.fedcba9876543210fedcba9876543210.tmp", "_seo/commits/.3.fedcba9876543210fedcba9876543210.tmp"
    for path in (old, young):
        (root / path).write_bytes(b"cut off")
    os.utime(root / old, (time.time() - 7200,) * 2)
    dry = collect_garbage(storage, dry_run=True)
    assert dry.temp_files == [(storage.uri(old), 7)] and (root / old).exists()
    report = collect_garbage(storage)  # --older-than 1h
    assert report.temp_files == [(storage.uri(old), 7)] and report.young_skipped >= 1
    assert not (root / old).exists() and (root / young).exists()
    removed = [uri for uri, _ in collect_garbage(storage, older_than_ms=0).temp_files]
    assert storage.uri(young) in removed and not (root / young).exists()
    assert all(uri.endswith(".prep") for uri in removed if uri != storage.uri(young))  # the last writer's next compaction
    assert _hidden_leftovers(root) == []


def test_a_writer_taking_over_does_not_stat_a_file_per_batch(tmp_path, monkeypatch):
    """``_seo/ledger`` keeps a file per batch for good: the take-over's sweep for dead temp files
    looks at its hidden files alone, so the start of a writer costs a name listing there, not a
    stat per batch (10,000 batches of history made the restart 0.6 s slower)."""
    from tests.commit.helpers import make_committer, stage_and_commit

    def stats_at_open(root: Path, batches: int) -> int:
        storage = open_storage(str(root))
        c = make_committer(storage, compact_interval=10)
        for b in range(batches):
            stage_and_commit(c, Q, b, [b])
        c.close()
        seen: list[str] = []
        real_stat = os.stat

        def counting_stat(path, *args, **kwargs):
            if "/_seo/ledger/" in str(path):
                seen.append(str(path))
            return real_stat(path, *args, **kwargs)

        c = make_committer(storage, compact_interval=10)
        with monkeypatch.context() as m:
            m.setattr(os, "stat", counting_stat)
            c.open()
        c.close()
        return len(seen)

    few, many = stats_at_open(tmp_path / "few", 5), stats_at_open(tmp_path / "many", 40)
    assert many == few, f"a writer's open stat'd {few} ledger files after 5 batches, {many} after 40"
