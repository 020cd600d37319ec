"""Batch log and compactible log behaviour, on a few storage backends (``layer_storage``)."""

from __future__ import annotations

import pytest

from streaming_exactly_once.commit.background.compaction_preparation import preparation_of
from streaming_exactly_once.errors import LogConflictError, LogCorruptError, MissingBatchError
from streaming_exactly_once.log.batch_log import BatchLog, parse_batch_file_name
from streaming_exactly_once.log.codec import DictCodec
from streaming_exactly_once.log.compactible_log import CompactibleLog


def rec(i):
    return {"id": i, "name": f"file-{i}"}


def test_batch_file_names():
    assert parse_batch_file_name("0") == (0, False)
    assert parse_batch_file_name("19.compact") == (19, True)
    for junk in (".0.crc", ".1.abc.tmp", "x", "1.json", "-1", "１"):
        assert parse_batch_file_name(junk) is None


def test_bytes_match_spark_layout(memory_storage):
    log = BatchLog(memory_storage, "log", DictCodec())
    log.add(0, [rec(0), rec(1)])
    assert memory_storage.read_bytes("log/0") == b'v1\n{"id":0,"name":"file-0"}\n{"id":1,"name":"file-1"}'
    log.add(1, [])
    assert memory_storage.read_bytes("log/1") == b"v1"
    assert log.get(1) == []


def test_add_is_idempotent_and_exclusive(layer_storage):
    log = BatchLog(layer_storage, "log", DictCodec(), kind="test log")
    assert log.add(0, [rec(0)]) is True
    assert log.add(0, [rec(0)]) is False  # our own retry
    with pytest.raises(LogConflictError) as err:
        log.add(0, [rec(99)])
    assert "batch 0" in str(err.value) and "log/0" in str(err.value)
    assert log.read(0) == [rec(0)]


def test_latest_range_and_gaps(layer_storage):
    log = BatchLog(layer_storage, "log", DictCodec())
    assert log.latest_batch_id() is None
    for i in (0, 1, 2, 4):
        log.add(i, [rec(i)])
    layer_storage.put_if_absent("log/.5.abc.tmp", b"junk")  # temp files are not batches
    layer_storage.put_if_absent("log/.0.crc", b"junk")
    assert log.list_batch_ids() == [0, 1, 2, 4]
    assert log.latest_batch_id(refresh=True) == 4
    assert log.gaps() == [3]
    assert [b for b, _ in log.get_range(0, 2)] == [0, 1, 2]
    with pytest.raises(MissingBatchError) as err:
        list(log.get_range(0, 4))
    assert err.value.missing == [3]
    assert "batches 0..4" in str(err.value)


def test_purge(memory_storage):
    log = BatchLog(memory_storage, "log", DictCodec())
    for i in range(5):
        log.add(i, [rec(i)])
    assert log.purge(3) == [0, 1, 2]
    assert log.list_batch_ids() == [3, 4]


def test_compactible_log_writes_spark_style_compacts(layer_storage):
    log = CompactibleLog(layer_storage, "c", DictCodec(), default_interval=3)
    for i in range(8):
        log.add(i, [rec(i)])
    files = sorted(e.name for e in layer_storage.list_dir("c"))
    assert files == ["0", "1", "2.compact", "3", "4", "5.compact", "6", "7"]
    assert [r["id"] for r in log.read(5)] == [0, 1, 2, 3, 4, 5]
    assert [r["id"] for r in log.all_records()] == list(range(8))
    assert list(log.valid_batches()) == [5, 6, 7]
    # as of an earlier batch: time travel over a compact boundary
    assert [r["id"] for r in log.all_records(as_of=4)] == [0, 1, 2, 3, 4]
    assert [r["id"] for r in log.all_records(as_of=1)] == [0, 1]


def test_compactible_log_derives_interval_from_existing_files(memory_storage):
    writer = CompactibleLog(memory_storage, "c", DictCodec(), default_interval=3)
    for i in range(7):
        writer.add(i, [rec(i)])
    reader = CompactibleLog(memory_storage, "c", DictCodec(), default_interval=10)
    assert reader.interval == 3
    assert [r["id"] for r in reader.all_records()] == list(range(7))


def test_compaction_retry_is_idempotent(memory_storage):
    log = CompactibleLog(memory_storage, "c", DictCodec(), default_interval=2)
    log.add(0, [rec(0)])
    assert log.add(1, [rec(1)]) is True
    assert log.add(1, [rec(1)]) is False
    with pytest.raises(LogConflictError):
        log.add(1, [rec(7)])


def test_retention_filter_applies_at_compaction_only(memory_storage):
    log = CompactibleLog(memory_storage, "c", DictCodec(), default_interval=3, retain=lambda r, now: r["id"] % 2 == 0)
    for i in range(4):
        log.add(i, [rec(i)])
    # 2.compact drops odd *previous* records; a batch's own records are always kept
    assert [r["id"] for r in log.read(2)] == [0, 2]
    assert [r["id"] for r in log.all_records()] == [0, 2, 3]


def test_missing_compact_file_is_a_named_error(memory_storage):
    log = CompactibleLog(memory_storage, "c", DictCodec(), default_interval=3)
    for i in range(5):
        log.add(i, [rec(i)])
    memory_storage.delete("c/2.compact")
    reader = CompactibleLog(memory_storage, "c", DictCodec(), default_interval=3)
    with pytest.raises(MissingBatchError) as err:
        reader.all_records()
    assert err.value.missing == [2]
    assert "as of batch 4" in str(err.value)
    with pytest.raises(MissingBatchError) as err:
        log.add(5, [rec(5)])  # the next compaction needs 2.compact
    assert "compact batch 5" in str(err.value)


def test_delete_expired_keeps_window_and_two_compacts(local_storage):
    log = CompactibleLog(local_storage, "c", DictCodec(), default_interval=3)
    for i in range(12):
        log.add(i, [rec(i)])
        log.delete_expired(i, min_batches_to_retain=2, cleanup_delay_ms=0)
    remaining = log.list_batch_ids()
    assert remaining == [8, 9, 10, 11]  # 8.compact .. 11.compact: two compact files
    assert [r["id"] for r in log.all_records()] == list(range(12))
    # a fresh reader derives the same interval from what is left
    assert CompactibleLog(local_storage, "c", DictCodec(), default_interval=10).interval == 3


def test_delete_expired_respects_cleanup_delay(local_storage):
    log = CompactibleLog(local_storage, "c", DictCodec(), default_interval=3)
    for i in range(12):
        log.add(i, [rec(i)])
        assert log.delete_expired(i, min_batches_to_retain=2, cleanup_delay_ms=3_600_000) == []
    assert len(log.list_batch_ids()) == 12


def test_prepared_compaction_gives_the_same_bytes(tmp_path):
    from streaming_exactly_once.storage import open_storage

    plain = CompactibleLog(open_storage(str(tmp_path / "a")), "c", DictCodec(), default_interval=4)
    prepared = CompactibleLog(open_storage(str(tmp_path / "b")), "c", DictCodec(), default_interval=4)
    for i in range(23):
        plain.add(i, [rec(i)])
        prepared.add(i, [rec(i)])
        if i % 3 != 1:  # sometimes the background falls behind: the compaction appends the rest
            preparation_of(prepared).advance()
    for name in ("3.compact", "7.compact", "11.compact", "15.compact", "19.compact"):
        assert (tmp_path / "a" / "c" / name).read_bytes() == (tmp_path / "b" / "c" / name).read_bytes()
    leftovers = [p.name for p in (tmp_path / "b" / "c").iterdir() if p.name.startswith(".")]
    assert leftovers == [".23.compact.prep"]  # the next one, already under way
    preparation_of(prepared).discard_all()
    assert not [p for p in (tmp_path / "b" / "c").iterdir() if p.name.startswith(".")]


def test_gaps_cost_what_is_present_and_name_a_stray_file(memory_storage):
    """r15: one file named like a huge batch id made gaps() enumerate every id below it."""
    log = BatchLog(memory_storage, "log", DictCodec(), kind="test log")
    for i in (0, 1, 3):
        log.add(i, [rec(i)])
    memory_storage.put_if_absent("log/1000000", b"v1")  # 10**11 in tests/cli: gaps() then never returned
    with pytest.raises(LogCorruptError) as err:
        log.gaps()
    message = str(err.value)
    assert "log/1000000" in message and "far beyond the previous batch 3" in message and "move it away" in message
    assert err.value.batch_id == 1000000
    memory_storage.delete("log/1000000")
    assert log.gaps() == [2]
    assert log.gaps([5, 9, 7]) == [6, 8]


def test_a_compactible_logs_gaps_are_counted_above_its_latest_compact_file(memory_storage):
    """Below the latest compact file no reader looks; retention's deletes there may come back
    in part after a power cut. Above it, a missing file is a lost batch."""
    log = CompactibleLog(memory_storage, "log", DictCodec(), default_interval=3)
    for i in range(11):  # 0 1 2.compact 3 4 5.compact 6 7 8.compact 9 10
        log.add(i, [rec(i)])
    for i in (1, 3, 7, 9):
        memory_storage.delete(f"log/{log.file_name(i)}")
    assert log.gaps() == [9]
    assert log.gaps([0, 3, 4, 6]) == [1, 2, 5]  # no compact file among them: every gap counts


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_a_compact_file_another_writer_made_is_compared_byte_for_byte(memory_storage, tmp_path, backend):
    """The concatenated compact file is streamed, never joined (#14, memory): losing its create
    to another writer must still accept only the very same bytes."""
    from streaming_exactly_once.storage import open_storage

    storage = memory_storage if backend == "memory" else open_storage(str(tmp_path / "t"))
    ours = CompactibleLog(storage, "c", DictCodec(), default_interval=3)
    for i in range(2):
        ours.add(i, [rec(i)])
    theirs = CompactibleLog(storage, "c", DictCodec(), default_interval=3)
    assert theirs.add(2, [rec(2)]) is True
    assert ours.add(2, [rec(2)]) is False  # the same bytes: a retry, accepted
    expected = storage.read_bytes("c/2.compact")
    storage.delete("c/2.compact")
    storage.put_if_absent("c/2.compact", expected[:-2] + b"9}")  # one byte differs, same length
    with pytest.raises(LogConflictError):
        CompactibleLog(storage, "c", DictCodec(), default_interval=3).add(2, [rec(2)])
    storage.delete("c/2.compact")
    storage.put_if_absent("c/2.compact", expected + b"\n{}")  # a longer file
    with pytest.raises(LogConflictError):
        CompactibleLog(storage, "c", DictCodec(), default_interval=3).add(2, [rec(2)])
