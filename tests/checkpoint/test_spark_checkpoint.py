"""Our checkpoint readers against a real Spark 4.x checkpoint (offsets, commits, sources, metadata)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from streaming_exactly_once.checkpoint import SparkCheckpoint
from streaming_exactly_once.manifest.paths import normalize_uri
from streaming_exactly_once.storage import open_storage
from tests.datagen import CSV_SCHEMA, write_csv_files

pytestmark = pytest.mark.spark


def test_reads_real_checkpoint(spark, tmp_path):
    write_csv_files(tmp_path / "in", n_files=13, rows_per_file=3)  # 13 > source-log compaction at 9
    seen: dict[int, set[str]] = {}

    def record(df, batch_id):
        files = {r.f for r in df.select(F.input_file_name().alias("f")).distinct().collect()}
        seen[batch_id] = {normalize_uri(f) for f in files}

    q = (
        spark.readStream.schema(CSV_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .csv(str(tmp_path / "in"))
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    ckpt = SparkCheckpoint(open_storage(str(tmp_path / "ckpt")))
    assert ckpt.query_id() == q.id
    assert ckpt.latest_batch_id() == 12
    assert ckpt.file_sources() == ["0"]
    assert "9.compact" in {e.name for e in ckpt.storage.list_dir("sources/0")}
    for batch in range(13):
        offsets = ckpt.offsets(batch)
        assert offsets.version == 1 and offsets.batch_timestamp_ms > 0
        assert offsets.offsets == ['{"logOffset":%d}' % batch]
        assert ckpt.commit(batch).next_batch_watermark_ms == 0
        files = ckpt.input_files(batch)
        assert {normalize_uri(f.path) for f in files} == seen[batch]
    assert ckpt.offsets(13) is None and ckpt.commit(13) is None


def _source_line(path: str, batch: int) -> str:
    return '{"path":"file:///in/%s","timestamp":1,"batchId":%d}' % (path, batch)


def test_a_long_lived_reader_finds_a_file_source_compacted_at_an_interval_it_could_not_know(tmp_path):
    """Spark's file-source log compacts at its configured interval (here 5); before the first
    ``.compact`` file nothing on disk tells it. A reader kept across batches (as the sink keeps
    it) must not keep the default it used then: batch 4 exists only as ``4.compact``."""
    from streaming_exactly_once.checkpoint.file_source_log import FileSourceLog

    storage = open_storage(str(tmp_path))
    for batch in range(4):
        storage.put_if_absent(f"sources/0/{batch}", f"v1\n{_source_line(f'f{batch}.csv', batch)}".encode())
    log = FileSourceLog(storage, "0")
    assert [e.path for e in log.entries_between(-1, 3)] == [f"file:///in/f{b}.csv" for b in range(4)]
    compact = "\n".join(["v1"] + [_source_line(f"f{b}.csv", b) for b in range(5)])
    storage.put_if_absent("sources/0/4.compact", compact.encode())
    assert [e.path for e in log.entries_between(3, 4)] == ["file:///in/f4.csv"]
    assert log.interval == 5  # known now, from the compact file's name: kept from here on
    storage.put_if_absent("sources/0/5", f"v1\n{_source_line('f5.csv', 5)}".encode())
    assert [e.path for e in log.entries_between(4, 5)] == ["file:///in/f5.csv"]


def test_a_long_lived_reader_reads_deltas_by_name_without_listing_the_log(tmp_path):
    """Before Spark's first .compact (an interval above the batch count never makes one) the
    log only grows: reading a batch must not list it."""
    from streaming_exactly_once.checkpoint.file_source_log import FileSourceLog
    from streaming_exactly_once.storage.local import LocalStorage

    class CountingStorage(LocalStorage):
        listings = 0

        def list_dir(self, path=""):  # type: ignore[no-untyped-def]
            CountingStorage.listings += 1
            return super().list_dir(path)

    storage = CountingStorage(str(tmp_path))
    log = FileSourceLog(storage, "0")
    for batch in range(30):  # interval 50: no compact file in the first 30 batches
        storage.put_if_absent(f"sources/0/{batch}", f"v1\n{_source_line(f'f{batch}.csv', batch)}".encode())
        assert [e.path for e in log.entries_between(batch - 1, batch)] == [f"file:///in/f{batch}.csv"]
    assert CountingStorage.listings == 0


def _write_checkpoint(storage, log_offsets: list[int], source_batches: int, stamp: int) -> None:
    """A file source's checkpoint: stream batch ``b`` ends at source-log batch ``log_offsets[b]``;
    one file a source-log batch, named after ``stamp`` (which run of the test wrote it)."""
    storage.atomic_write("metadata", b'{"id":"5d0c44a4-0000-4000-8000-00000000cafe"}\n')
    for batch in range(source_batches):
        storage.atomic_write(f"sources/0/{batch}", f"v1\n{_source_line(f's{stamp}-{batch}.csv', batch)}".encode())
    for batch, end in enumerate(log_offsets):
        meta = '{"batchWatermarkMs":0,"batchTimestampMs":%d,"conf":{}}' % (stamp * 1000 + batch)
        storage.atomic_write(f"offsets/{batch}", f'v1\n{meta}\n{{"logOffset":{end}}}'.encode())


def test_a_checkpoint_recreated_at_the_same_path_is_read_afresh_by_the_next_run(tmp_path):
    """The reader keeps what it read during a run of the query (a batch reads its own offsets and
    the one before it's, which the batch before read). A checkpoint deleted and recreated at the
    same path - here with the same query id, as a restored copy has - is read by another run:
    batch 2's files are the new checkpoint's, not those the old offsets of batch 1 would give."""
    import shutil

    storage = open_storage(str(tmp_path / "ckpt"))
    _write_checkpoint(storage, [0, 1, 2], source_batches=3, stamp=1)
    ckpt = SparkCheckpoint(storage)
    for batch in range(3):  # one run: batches 0, 1, 2
        ckpt.begin_batch("run-1")
        assert ckpt.offsets(batch).batch_timestamp_ms == 1000 + batch
        assert [f.path for f in ckpt.input_files(batch)] == [f"file:///in/s1-{batch}.csv"]
    shutil.rmtree(tmp_path / "ckpt")
    _write_checkpoint(storage, [0, 2, 3], source_batches=4, stamp=2)  # batch 1 read two source batches
    ckpt.begin_batch("run-2")  # the query started again on the recreated checkpoint
    assert ckpt.offsets(1).batch_timestamp_ms == 2001
    assert [f.path for f in ckpt.input_files(2)] == ["file:///in/s2-3.csv"]


def test_within_a_run_each_offsets_file_is_read_once(tmp_path):
    from streaming_exactly_once.storage.local import LocalStorage

    class CountingStorage(LocalStorage):
        reads: list[str] = []

        def read_bytes(self, path):  # type: ignore[no-untyped-def]
            CountingStorage.reads.append(path)
            return super().read_bytes(path)

    storage = CountingStorage(str(tmp_path))
    _write_checkpoint(storage, list(range(6)), source_batches=6, stamp=1)
    ckpt = SparkCheckpoint(storage)

    def batch(run, b):  # what the sink reads for a batch
        ckpt.begin_batch(run)
        ckpt.offsets(b)
        ckpt.input_files(b)
        ckpt.start_offsets(b)

    for b in range(3):
        batch("run-1", b)
    assert [p for p in CountingStorage.reads if p.startswith("offsets/")] == ["offsets/0", "offsets/1", "offsets/2"]
    CountingStorage.reads.clear()
    for b in range(3, 6):  # no run known (Spark Connect): within a batch still once
        batch(None, b)
    read = sorted(p for p in CountingStorage.reads if p.startswith("offsets/"))
    assert read == ["offsets/2", "offsets/3", "offsets/3", "offsets/4", "offsets/4", "offsets/5"]
