"""Compaction that copies the previous compact file inside the storage (#14, cost flat with
history): the same bytes as the streamed path, the same create-if-absent, and the checks that
decide when the storage may copy the file unread."""

from __future__ import annotations

import pytest

from streaming_exactly_once.commit.background.compaction_preparation import preparation_of
from streaming_exactly_once.errors import LogConflictError, LogCorruptError
from streaming_exactly_once.log.codec import DictCodec
from streaming_exactly_once.log.compactible_log import CompactibleLog
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.storage.base import ByteRange


def rec(i):
    return {"id": i, "name": f"file-{i}", "pad": "x" * (i % 7)}


def _log(storage, *, threshold=0):
    log = CompactibleLog(storage, "c", DictCodec(), default_interval=4)
    log.copy_threshold = threshold  # every compact file is copied by the storage, however small
    log.copy_vouched = lambda batch_id: True  # as the manifest does for a file with a matching index
    return log


def _compacts(storage):
    return {e.name: storage.read_bytes(e.path) for e in storage.list_dir("c") if e.name.endswith(".compact")}


def test_copied_and_streamed_compactions_give_the_same_bytes(tmp_path, memory_storage):
    local = open_storage(str(tmp_path / "t"))
    copied, streamed, prepared = _log(local.child("a")), _log(memory_storage), _log(local.child("b"))
    for i in range(31):
        records = [rec(i * 10 + j) for j in range(i % 3)]
        copied.add(i, records)
        streamed.add(i, records)
        prepared.add(i, records)
        if i % 4 != 1:  # sometimes the background falls behind: the compaction appends the rest
            preparation_of(prepared).advance()
    expected = _compacts(memory_storage)
    assert sorted(expected) == ["11.compact", "15.compact", "19.compact", "23.compact", "27.compact", "3.compact", "7.compact"]
    assert _compacts(local.child("a")) == expected == _compacts(local.child("b"))
    assert copied.compact_range(27, context="test") == ByteRange("c/27.compact", 0, len(expected["27.compact"]))


def test_only_large_compact_files_are_copied(tmp_path):
    log = _log(open_storage(str(tmp_path)), threshold=1 << 20)
    for i in range(4):
        log.add(i, [rec(i)])
    assert log.compact_range(3, context="test") is None  # small: read and checked line by line
    assert log.compact_range(2, context="test") is None  # a delta is never copied unread


@pytest.mark.parametrize(
    "body,copied",
    [
        (b'v1\n{"id":1}\n{"id":2}', True),
        (b'v1\n{"id":1}\n{"id":2}\n', True),  # a final newline (Spark never writes one) is left out
        (b'v1\r\n{"id":1}\n{"id":2}', False),  # another header: the streamed path rewrites it
        (b'v1\n{"id":1}\n{"id":2}\n\n', False),  # not one record per line at the end
        (b'v1\n{"id":1}\n', True),
        (b"v1", False),  # no records: the streamed path copies nothing
    ],
)
def test_what_is_copied_unread_gives_the_streamed_bytes(tmp_path, memory_storage, body, copied):
    """Spark-written or odd previous compact files: where the cheap check passes, the copy is
    byte-identical to the streamed path; where it does not, the streamed path decides."""
    local = open_storage(str(tmp_path))
    logs = [_log(local), _log(memory_storage)]
    for log in logs:
        log.storage.put_if_absent("c/3.compact", body)
    assert (logs[0].compact_range(3, context="test") is not None) == copied
    results = []
    for log in logs:
        try:
            for i in range(4, 8):
                log.add(i, [rec(i)])
            results.append(log.storage.read_bytes("c/7.compact"))
        except LogCorruptError as exc:
            results.append(type(exc))
    assert results[0] == results[1]


def test_a_damaged_last_record_is_reported_not_copied(tmp_path):
    storage = open_storage(str(tmp_path))
    log = _log(storage)
    storage.put_if_absent("c/3.compact", b'v1\n{"id":1}\n{"id":2}\n{"id":')  # cut short by a crash of another tool
    with pytest.raises(LogCorruptError, match="3.compact"):
        for i in range(4, 8):
            log.add(i, [rec(i)])
    assert not storage.exists("c/7.compact")
    assert not [e.name for e in storage.list_dir("c") if e.name.startswith(".")]


def test_a_compact_file_already_there_is_compared_not_replaced(tmp_path):
    storage = open_storage(str(tmp_path))
    log = _log(storage)
    for i in range(7):
        log.add(i, [rec(i)])
    twin = _log(open_storage(str(tmp_path)))  # another writer object: nothing cached
    twin._note(6)
    assert log.add(7, [rec(7)]) is True
    assert twin.add(7, [rec(7)]) is False  # the same bytes: our own retry, or a twin
    before = storage.read_bytes("c/7.compact")
    with pytest.raises(LogConflictError):
        twin.add(7, [rec(70)])  # other records: a second writer
    assert storage.read_bytes("c/7.compact") == before
    assert not [e.name for e in storage.list_dir("c") if e.name.startswith(".")]


def _entry(i):
    from streaming_exactly_once.manifest.entry import ManifestEntry

    return ManifestEntry.for_file(f"file:///t/day={i % 3}/part-{i:08d}.parquet", size=1000 + i, modification_time=1795313165250)


def test_the_manifest_copies_only_a_compact_file_its_index_vouches_for(tmp_path):
    """A compact file damaged at rest must stop the writer with a named error, as
    reading it line by line does - never be copied forward. The manifest copies a compact file
    only when an index built from it as it is now exists (its builder parsed every line)."""
    import os

    from streaming_exactly_once.commit.committer import vouch_by_index
    from streaming_exactly_once.manifest.manifest_index import write_index
    from streaming_exactly_once.manifest.manifest_log import ManifestLog

    storage = open_storage(str(tmp_path))
    log = ManifestLog(storage, default_interval=4)
    log.copy_threshold = 0
    for b in range(4):
        log.add(b, [_entry(b * 100 + i) for i in range(50)])
    assert log.compact_range(3, context="test") is not None  # its own writer vouches for it
    other = ManifestLog(open_storage(str(tmp_path)), default_interval=4)  # a writer that took over
    vouch_by_index(other)  # a committer's manifest takes a matching reader index as its voucher
    other.copy_threshold = 0
    assert other.compact_range(3, context="test") is None  # no index yet: read and checked
    assert write_index(storage, 3, other)
    assert other.compact_range(3, context="test") is not None  # vouched for: copied unread
    # damage in the middle, at rest (same size; the index records size and mtime)
    path = tmp_path / "_spark_metadata" / "3.compact"
    data = path.read_bytes()
    middle = data.index(b"\n", len(data) // 2)
    path.write_bytes(data[:middle] + b"\n" + data[middle + 1 :].replace(b"{", b"\n", 1)[: len(data) - middle - 1])
    os.utime(path, ns=(1, 1_000_000_000 + 123_456_789))
    assert log.compact_range(3, context="test") is None
    assert other.compact_range(3, context="test") is None
    for b in range(4, 7):
        log.add(b, [_entry(b * 100)])
    with pytest.raises(LogCorruptError, match="3.compact"):
        log.add(7, [_entry(700)])
    assert not (tmp_path / "_spark_metadata" / "7.compact").exists()


def test_a_paced_copy_rests_only_while_ahead_and_never_keeps_the_compaction_waiting(tmp_path, monkeypatch):
    """#14 pacing: the background copy of the previous compact file rests between slices while
    it is ahead of the batches; the compaction batch that needs it (``publish``) ends the rests
    and gets the very bytes an unpaced copy gives."""
    import threading

    from streaming_exactly_once.commit.background import compaction_preparation as prep_module

    storage = open_storage(str(tmp_path / "t"))
    log = _log(storage.child("paced"), threshold=0)
    twin = _log(storage.child("plain"), threshold=0)
    for i in range(4):  # compact file 3: many slices of 64 bytes
        records = [rec(i * 100 + j) for j in range(20)]
        log.add(i, records)
        twin.add(i, records)
    monkeypatch.setattr(prep_module, "SLICE_BYTES", 64)
    monkeypatch.setattr(prep_module, "PACE", 1e6)  # a rest is "forever" unless something ends it
    rests: list[float] = []
    real_wait = preparation_of(log)._hurry.wait

    def wait(timeout=None):
        rests.append(timeout)
        return real_wait(timeout)

    monkeypatch.setattr(preparation_of(log)._hurry, "wait", wait)
    copying = threading.Thread(target=preparation_of(log).advance, daemon=True)
    copying.start()  # latest batch 3, next compaction 7: ahead of the batches, so it rests
    while not rests:
        copying.join(0.01)
    for i in range(4, 7):
        twin.add(i, [rec(i)])
        log.add(i, [rec(i)])  # deltas: the copy is now behind, but it is resting
    assert log.add(7, [rec(7)]) is True  # publish ends the rest instead of waiting for it
    twin.add(7, [rec(7)])
    copying.join(30)
    assert not copying.is_alive()
    assert storage.read_bytes("paced/c/7.compact") == storage.read_bytes("plain/c/7.compact")
    assert len(rests) == 1  # it rested while ahead only; then the publish hurried it


def test_a_copy_behind_the_batches_does_not_rest(tmp_path, monkeypatch):
    from streaming_exactly_once.commit.background import compaction_preparation as prep_module

    storage = open_storage(str(tmp_path / "t"))
    log = _log(storage, threshold=0)
    for i in range(7):  # compact 3, deltas 4 to 6: the compaction batch 7 is next
        log.add(i, [rec(i * 100 + j) for j in range(20)])
    monkeypatch.setattr(prep_module, "SLICE_BYTES", 64)
    monkeypatch.setattr(prep_module, "PACE", 1e6)
    monkeypatch.setattr(preparation_of(log)._hurry, "wait", lambda timeout=None: pytest.fail("rested while behind"))
    assert storage.info("c/3.compact").size > 64 * 3  # several slices
    preparation_of(log).advance()
    assert preparation_of(log).holds(7)
    assert log.add(7, [rec(7)]) is True


@pytest.mark.parametrize("restore_mtime", [True, False])
def test_a_writer_does_not_vouch_for_its_own_compact_file_once_it_was_rewritten(tmp_path, restore_mtime):
    """Red team #14 (lineage vouching): a compact file its own writer wrote is copied unread only
    while it is unchanged - a same-size rewrite with the mtime set back (``cp -p``, a restore) or
    within the same mtime tick moves the inode's status-change time, so the next compaction reads
    it, and stops with a named error instead of copying the damage forward."""
    import os

    storage = open_storage(str(tmp_path))
    log = CompactibleLog(storage, "c", DictCodec(), default_interval=4)
    log.copy_threshold = 0
    for b in range(4):
        log.add(b, [rec(b * 100 + i) for i in range(30)])
    assert log.copy_vouched(3)
    path = tmp_path / "c" / "3.compact"
    before = os.stat(path)
    with open(path, "r+b") as fh:  # same size: one record split in two
        fh.seek(path.stat().st_size // 2)
        fh.write(b"\n")
    if restore_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert not log.copy_vouched(3)
    for b in range(4, 7):
        log.add(b, [rec(b)])
    with pytest.raises(LogCorruptError, match="3.compact"):
        log.add(7, [rec(7)])
    assert not (tmp_path / "c" / "7.compact").exists()


def _crlf_header(lf: bytes) -> bytes:
    return lf.replace(b"\n", b"\r\n", 1)


def _crlf_after_header(lf: bytes) -> bytes:
    newline = lf.find(b"\n")
    return lf if newline < 0 else lf[: newline + 1] + lf[newline + 1 :].replace(b"\n", b"\r\n")


#: A log file as Spark accepts it: Scala's ``getLines`` ends a line at ``\r\n`` as at ``\n``.
CRLF = {
    "CRLF header": _crlf_header,
    "CRLF everywhere": lambda lf: lf.replace(b"\n", b"\r\n"),
    "CRLF everywhere and a last CRLF": lambda lf: lf.replace(b"\n", b"\r\n") + b"\r\n",
    "CRLF after an LF header": _crlf_after_header,
    "a lone CRLF header": lambda lf: b"v1\r\n" if lf == b"v1" else lf.replace(b"\n", b"\r\n"),
}


@pytest.mark.parametrize("variant", sorted(CRLF))
@pytest.mark.parametrize("how", ["read", "prepared", "memory"])
def test_a_crlf_log_compacts_to_the_bytes_of_its_lf_twin(tmp_path, memory_storage, variant, how):
    """Red team #14 G5: Spark reads ``\\r\\n`` line ends, so the writer must compact such files
    too - into a plain LF compact file, the very bytes it writes from the same log with ``\\n``.
    (Copying a vouched-for file unread is the manifest's, whose index vouches only for LF files:
    ``tests/readers/test_reader_memory.py``.)"""
    storage = memory_storage if how == "memory" else open_storage(str(tmp_path / "crlf"))
    twin_storage = open_storage(str(tmp_path / "lf"))
    compact = b"v1" if variant == "a lone CRLF header" else b"v1" + b"".join(b'\n{"id":%d}' % i for i in range(30))
    files = {"c/3.compact": compact, "c/4": b'v1\n{"id":4}\n{"id":44}', "c/5": b"v1", "c/6": b'v1\n{"id":6}'}
    logs = []
    for where, change in ((storage, CRLF[variant]), (twin_storage, lambda lf: lf)):
        for path, lf in files.items():
            where.put_if_absent(path, change(lf))
        log = _log(where)
        log.copy_vouched = lambda batch_id: False  # read and checked line by line (raw_body)
        log._note(6)
        logs.append(log)
    crlf, lf = logs
    assert crlf.read(3, context="test") == lf.read(3, context="test")
    if how == "prepared":
        preparation_of(crlf).advance()
        assert preparation_of(crlf).holds(7)
    assert crlf.add(7, [rec(7)]) is True and lf.add(7, [rec(7)]) is True
    expected = twin_storage.read_bytes("c/7.compact")
    assert b"\r" not in expected and storage.read_bytes("c/7.compact") == expected
    assert crlf.read(7, context="test") == lf.read(7, context="test")


@pytest.mark.parametrize(
    "body",
    [
        b'v1\r\r\n{"id":1}',  # the header line is "v1\r", which is not a header (nor for Spark)
        b'v1\r\n{"id":1}\r\n\r\n{"id":2}',  # a blank line, whatever its line end
        b'v1\r\n{"id":1}\r\n{"id":',  # cut short
    ],
)
def test_a_damaged_crlf_log_is_refused_by_the_writer_as_by_the_reader(tmp_path, body):
    storage = open_storage(str(tmp_path))
    log = _log(storage, threshold=1 << 30)
    storage.put_if_absent("c/3.compact", body)
    log._note(3)
    with pytest.raises(LogCorruptError, match="3.compact") as read_error:
        log.read(3, context="test")
    for i in range(4, 7):
        log.add(i, [rec(i)])
    with pytest.raises(LogCorruptError, match="3.compact") as write_error:
        log.add(7, [rec(7)])
    assert str(write_error.value).split(" (")[0] == str(read_error.value).split(" (")[0] or "line" in str(write_error.value)
    assert not storage.exists("c/7.compact")


def test_a_prepared_compaction_of_a_file_it_must_read_writes_it_in_slices_with_the_same_bytes(tmp_path, monkeypatch):
    """A previous compact file nothing vouches for is read and checked, then written to the work
    file a slice at a time, each written back (#14 pacing): the bytes are those of a compaction
    built without preparation."""
    from streaming_exactly_once.commit.background import compaction_preparation as prep_module

    monkeypatch.setattr(prep_module, "SLICE_BYTES", 100)
    storage = open_storage(str(tmp_path / "t"))
    logs = []
    for name in ("prepared", "plain"):
        log = CompactibleLog(storage.child(name), "c", DictCodec(), default_interval=4)
        log.copy_threshold = 0
        logs.append(log)
    synced: list[str] = []
    real_sync = type(storage).sync_prepared
    monkeypatch.setattr(type(storage), "sync_prepared", lambda self, path: synced.append(path) or real_sync(self, path))
    for i in range(12):
        records = [rec(i * 100 + j) for j in range(15)]
        for log in logs:
            log.add(i, records)
        logs[0]._written_compacts = {}  # vouched by nothing: read, checked, written
        preparation_of(logs[0]).advance()
    assert len(synced) > 10  # the body went in slices
    for name in ("c/3.compact", "c/7.compact", "c/11.compact"):
        assert storage.read_bytes(f"prepared/{name}") == storage.read_bytes(f"plain/{name}")


def test_a_compaction_that_found_the_copy_unfinished_leaves_the_next_one_to_its_batch(tmp_path, monkeypatch):
    """#14 back-off: back to back the copy never keeps up and only shares the disk with the
    batches, so after a compaction batch that had to hurry it, the next compaction is built by
    its own batch; a copy that keeps up again ends the back-off. Bytes never differ."""
    import threading

    from streaming_exactly_once.commit.background import compaction_preparation as prep_module

    storage = open_storage(str(tmp_path / "t"))
    log = _log(storage.child("paced"), threshold=0)
    twin = _log(storage.child("plain"), threshold=0)

    def add(i, records=None):
        records = records or [rec(i)]
        twin.add(i, records)
        return log.add(i, records)

    for i in range(4):
        add(i, [rec(i * 100 + j) for j in range(20)])
    monkeypatch.setattr(prep_module, "SLICE_BYTES", 64)
    monkeypatch.setattr(prep_module, "PACE", 1e6)  # rests until the compaction batch hurries it
    copying = threading.Thread(target=preparation_of(log).advance, daemon=True)
    copying.start()
    while not preparation_of(log)._copying:
        copying.join(0.01)
    for i in range(4, 7):
        add(i)
    assert add(7) is True  # found the copy under way: hurried it, and backs off
    copying.join(30)
    for i in range(8, 11):
        add(i)
        preparation_of(log).advance()
    assert not preparation_of(log).holds(11)  # left to its batch
    assert add(11) is True
    monkeypatch.setattr(prep_module, "PACE", 0.0)
    for i in range(12, 15):
        add(i)
        preparation_of(log).advance()
    assert preparation_of(log).holds(15)  # prepared again, and done before its batch
    assert add(15) is True
    assert preparation_of(log)._backoff == 0
    for name in ("c/7.compact", "c/11.compact", "c/15.compact"):
        assert storage.read_bytes(f"paced/{name}") == storage.read_bytes(f"plain/{name}")


def test_a_late_preparation_task_neither_copies_for_a_published_compaction_nor_uses_a_skip(tmp_path, monkeypatch):
    """Red team #14: a background task that read the latest batch before the compaction batch
    was noted sees a target that is already published - it must leave it alone."""
    log = _log(open_storage(str(tmp_path)), threshold=0)
    for i in range(8):
        log.add(i, [rec(i * 100 + j) for j in range(10)])
    preparation_of(log)._skip = 1
    monkeypatch.setattr(log, "latest_batch_id", lambda **kw: 6)  # stale: 7.compact is published
    preparation_of(log).advance()
    assert not preparation_of(log).holds(7) and preparation_of(log)._skip == 1
    assert not [e.name for e in log.storage.list_dir("c") if e.name.endswith(".prep")]


def test_a_work_file_whose_write_failed_is_dropped(tmp_path, monkeypatch):
    """Red team #14: after a failed write its size no longer says what is in it; it is removed,
    not appended to again, and the compaction batch builds the same bytes."""
    from streaming_exactly_once.commit.background import compaction_preparation as prep_module

    monkeypatch.setattr(prep_module, "SLICE_BYTES", 64)
    storage = open_storage(str(tmp_path / "t"))
    log = CompactibleLog(storage.child("a"), "c", DictCodec(), default_interval=4)
    twin = CompactibleLog(storage.child("b"), "c", DictCodec(), default_interval=4)
    for i in range(4):
        for one in (log, twin):
            one.add(i, [rec(i * 100 + j) for j in range(10)])
    log._written_compacts = {}  # read and written in slices, not copied
    real = type(storage).sync_prepared
    calls = {"n": 0}

    def failing(self, path):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(5, "injected EIO")
        return real(self, path)

    monkeypatch.setattr(type(storage), "sync_prepared", failing)
    with pytest.raises(OSError, match="injected"):
        preparation_of(log).advance()
    assert not preparation_of(log).holds(7)
    assert not [e.name for e in storage.list_dir("a/c") if e.name.startswith(".")]
    for i in range(4, 8):
        for one in (log, twin):
            one.add(i, [rec(i)])
    assert storage.read_bytes("a/c/7.compact") == storage.read_bytes("b/c/7.compact")


def _copy_under_way(log, monkeypatch, *, slice_bytes=64):
    """Start ``log``'s background copy for its next compaction, slice by slice, each slice
    waiting for the test: returns (thread, release) once the copy is under way - ``release(n)``
    lets n more slices run."""
    import threading

    from streaming_exactly_once.commit.background import compaction_preparation as prep_module

    monkeypatch.setattr(prep_module, "SLICE_BYTES", slice_bytes)
    monkeypatch.setattr(prep_module, "PACE", 0.0)
    allowed = threading.Semaphore(0)

    def gated_copy(store, path, source, target):
        def one_slice(start, n):
            allowed.acquire()
            store.append_range_prepared(path, ByteRange(source.path, source.offset + start, n))

        preparation_of(log)._in_slices(source.length, one_slice, target)

    monkeypatch.setattr(preparation_of(log), "_copy_paced", gated_copy)
    copying = threading.Thread(target=preparation_of(log).advance, daemon=True)
    copying.start()
    while not preparation_of(log)._copying:  # under way: waiting for its first slice
        copying.join(0.01)

    def release(n):
        for _ in range(n):
            allowed.release()

    return copying, release


def test_a_batch_keeps_pace_with_the_copy_and_the_compaction_batch_finds_it_done(tmp_path, monkeypatch):
    """#14 keeping pace: after the k-th of the ``interval - 1`` batches before a compaction, a
    batch waits until (k - 1) / (interval - 2) of the copy is done - back to back, the copy's
    time is spread over those batches instead of stalling the compaction batch."""
    import threading
    import time

    storage = open_storage(str(tmp_path / "t"))
    log = _log(storage.child("paced"), threshold=0)
    twin = _log(storage.child("plain"), threshold=0)
    for i in range(4):
        for one in (log, twin):
            one.add(i, [rec(i * 100 + j) for j in range(30)])
    copying, release = _copy_under_way(log, monkeypatch)
    total = preparation_of(log)._copy_total
    slices = -(-total // 64)
    assert slices >= 9
    for one in (log, twin):
        one.add(4, [rec(4)])  # the first of 3 batches before compaction 7: owes nothing yet
    assert preparation_of(log).keep_pace(timeout=30) < 0.1
    for one in (log, twin):
        one.add(5, [rec(5)])  # the second: half of the copy is due
    waited: list[float] = []
    pacing = threading.Thread(target=lambda: waited.append(preparation_of(log).keep_pace(timeout=30)))
    pacing.start()
    pacing.join(0.2)
    assert pacing.is_alive()  # nothing copied yet: it waits
    release(-(-slices // 2) - 1)
    pacing.join(0.2)
    assert pacing.is_alive()  # one slice short of half
    release(1)
    pacing.join(10)
    assert not pacing.is_alive() and waited
    assert preparation_of(log)._copy_done * 2 >= total
    release(slices)  # the rest
    copying.join(10)
    assert preparation_of(log).keep_pace(timeout=30) < 0.1  # done: no wait
    for one in (log, twin):
        one.add(6, [rec(6)])
    preparation_of(log).advance()
    began = time.monotonic()
    assert log.add(7, [rec(7)]) is True
    twin.add(7, [rec(7)])
    assert time.monotonic() - began < 5
    assert preparation_of(log)._backoff == 0  # it found the copy done
    assert storage.read_bytes("paced/c/7.compact") == storage.read_bytes("plain/c/7.compact")


def test_keeping_pace_waits_for_no_copy_and_gives_up_after_its_timeout(tmp_path, monkeypatch):
    log = _log(open_storage(str(tmp_path)), threshold=0)
    for i in range(6):
        log.add(i, [rec(i * 100 + j) for j in range(30)])
    assert preparation_of(log).keep_pace(timeout=30) < 0.1  # no copy under way: nothing to wait for
    copying, release = _copy_under_way(log, monkeypatch)
    assert 0.2 <= preparation_of(log).keep_pace(timeout=0.2) < 5  # stuck copy: the batch goes on
    release(10_000)
    copying.join(10)
    assert not copying.is_alive()


def test_the_copy_takes_its_slices_only_between_commits(tmp_path, monkeypatch):
    """#14: beside the commits' small fsyncs the copy ran 3x slower and held each of them
    behind its write-back; it waits while the writer's ``CommitGate`` is closed."""
    import threading

    from streaming_exactly_once.commit.background import compaction_preparation as prep_module

    monkeypatch.setattr(prep_module, "SLICE_BYTES", 64)
    monkeypatch.setattr(prep_module, "PACE", 0.0)
    log = _log(open_storage(str(tmp_path)), threshold=0)
    for i in range(7):
        log.add(i, [rec(i * 100 + j) for j in range(30)])
    gate = prep_module.CommitGate()
    preparation_of(log).gate = gate
    with gate.committing():
        copying = threading.Thread(target=preparation_of(log).advance, daemon=True)
        copying.start()
        copying.join(0.3)
        assert copying.is_alive() and preparation_of(log)._copy_done == 0  # no slice during a commit
    copying.join(10)
    assert not copying.is_alive() and preparation_of(log).holds(7)
    assert preparation_of(log)._copy_done == preparation_of(log)._copy_total > 0


def test_a_copy_for_a_compaction_its_batch_built_meanwhile_stops(tmp_path, monkeypatch):
    """#14: a copy that started late (or whose compaction was left to its batch) went on for
    a second after its compaction was published, and held up the next compaction's copy."""
    log = _log(open_storage(str(tmp_path)), threshold=0)
    for i in range(7):
        log.add(i, [rec(i * 100 + j) for j in range(30)])
    copying, release = _copy_under_way(log, monkeypatch)
    monkeypatch.setattr(preparation_of(log), "holds", lambda compact_id: False)  # as if backing off
    assert log.add(7, [rec(7)]) is True  # built by its own batch, beside the copy
    release(2)
    copying.join(10)
    assert not copying.is_alive()
    assert preparation_of(log)._copy_done < preparation_of(log)._copy_total  # stopped early
    assert not [e.name for e in log.storage.list_dir("c") if e.name.endswith(".prep")]


def test_a_stopping_writer_gives_up_the_copy_instead_of_finishing_it(tmp_path, monkeypatch):
    """#14: a writer that closes (or reopens) waits for its background work, and then discards
    its work file: the copy under way stops at its next slice instead of copying the previous
    compact file to the end (50 MB at 250k live files), and no new one starts until the
    preparation is reset (``discard_all``, at the next open)."""
    log = _log(open_storage(str(tmp_path)), threshold=0)
    for i in range(6):
        log.add(i, [rec(i * 100 + j) for j in range(30)])
    copying, release = _copy_under_way(log, monkeypatch)
    preparation_of(log).stop()
    release(2)
    copying.join(10)
    assert not copying.is_alive()
    assert preparation_of(log)._copy_done < preparation_of(log)._copy_total  # stopped early
    assert not preparation_of(log).holds(7)
    assert not [e.name for e in log.storage.list_dir("c") if e.name.endswith(".prep")]
    preparation_of(log).advance()
    assert not preparation_of(log).holds(7)  # stopped: no new copy either
    preparation_of(log).discard_all()
    release(10_000)
    preparation_of(log).advance()
    assert preparation_of(log).holds(7)  # reset: preparing again
