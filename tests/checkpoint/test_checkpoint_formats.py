"""Spark 4.x's checkpoint formats, byte for byte as Spark 4.3 wrote them (``checkpoint.offset_seq``,
``checkpoint.commit_marker``): offsets log v2 (sources keyed by ordinal or by name, in no fixed
order), commit log v2 and v3 (named sinks), and the initial offsets a partitioned source records."""

from __future__ import annotations

import pytest

from streaming_exactly_once.checkpoint import SparkCheckpoint
from streaming_exactly_once.errors import LogCorruptError
from streaming_exactly_once.storage import open_storage

META = '{"batchWatermarkMs":0,"batchTimestampMs":1795936419938,"conf":{"spark.sql.shuffle.partitions":"1"}}'


def _entry(path: str, batch: int) -> str:
    return '{"path":"file:///in/%s","timestamp":1,"batchId":%d}' % (path, batch)


def _checkpoint(tmp_path, offsets: dict[int, list[str]], version: int = 2) -> SparkCheckpoint:
    storage = open_storage(str(tmp_path))
    for batch, lines in offsets.items():
        storage.put_if_absent(f"offsets/{batch}", "\n".join([f"v{version}", META, *lines]).encode())
    return SparkCheckpoint(storage)


def test_offsets_v2_of_unnamed_sources_are_looked_up_by_their_id_not_their_line(tmp_path):
    """Spark 4.3 with ``offsetLog.formatVersion=2`` wrote source 1's line before source 0's."""
    ckpt = _checkpoint(tmp_path, {0: ['1:{"logOffset":0}', '0:{"logOffset":0}'], 1: ['1:{"logOffset":0}', '0:{"logOffset":1}']})
    storage = ckpt.storage
    storage.put_if_absent("sources/0/0", f"v1\n{_entry('a0.json', 0)}".encode())
    storage.put_if_absent("sources/0/1", f"v1\n{_entry('a1.json', 1)}".encode())
    storage.put_if_absent("sources/1/0", f"v1\n{_entry('b0.json', 0)}".encode())
    assert ckpt.offsets(0).by_source() == {"1": '{"logOffset":0}', "0": '{"logOffset":0}'}
    assert [(f.source, f.path) for f in ckpt.input_files(0)] == [(0, "file:///in/a0.json"), (1, "file:///in/b0.json")]
    assert [(f.source, f.path) for f in ckpt.input_files(1)] == [(0, "file:///in/a1.json")]  # source 1 read nothing new


def test_offsets_v2_of_named_sources_find_their_logs_by_name(tmp_path):
    """Spark 4.x's source evolution names each source (``DataStreamReader.name``): its log is
    ``sources/<name>/`` and its offsets line ``<name>:...``."""
    ckpt = _checkpoint(tmp_path, {0: ['a:{"logOffset":0}', 'b:{"logOffset":0}']})
    ckpt.storage.put_if_absent("sources/a/0", f"v1\n{_entry('a.json', 0)}".encode())
    ckpt.storage.put_if_absent("sources/b/0", f"v1\n{_entry('b.json', 0)}".encode())
    assert ckpt.file_sources() == ["a", "b"]
    assert sorted(f.path for f in ckpt.input_files(0)) == ["file:///in/a.json", "file:///in/b.json"]


@pytest.mark.parametrize("line", ['{"logOffset":0}', ':{"logOffset":0}'])
def test_an_offsets_v2_line_without_its_source_id_is_corrupt(tmp_path, line):
    ckpt = _checkpoint(tmp_path, {0: [line]})
    with pytest.raises(LogCorruptError, match="sourceId"):
        ckpt.offsets(0)


def test_an_offsets_v2_file_naming_a_source_twice_is_corrupt(tmp_path):
    ckpt = _checkpoint(tmp_path, {0: ['0:{"logOffset":0}', '0:{"logOffset":1}']})
    with pytest.raises(LogCorruptError, match="repeats source '0'"):
        ckpt.offsets(0)


@pytest.mark.parametrize(
    "body",
    [
        b'v1\n{"nextBatchWatermarkMs":0}',
        b'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{}}',
        b'v3\n{"nextBatchWatermarkMs":0,"sinkMetadataMap":{"s1":{"sinkName":"s1","commitOffset":"-",'
        b'"providerName":"org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink","apiVersion":"DSv1","isActive":true}}}',
    ],
)
def test_commit_log_v1_v2_and_v3_are_read(tmp_path, body):
    storage = open_storage(str(tmp_path))
    storage.put_if_absent("commits/0", body)
    marker = SparkCheckpoint(storage).commit(0)
    assert marker.version == int(body[1:2]) and marker.next_batch_watermark_ms == 0


def test_where_a_first_batch_starts_is_taken_per_source(tmp_path):
    """Kafka's source records its initial offsets in ``sources/<key>/0``; a file source keeps its
    log's first batch at the same path, which is no start of anything."""
    ckpt = _checkpoint(tmp_path, {0: ['{"t":{"0":10}}', '{"logOffset":0}', '{"u":{"0":3}}']}, version=1)
    ckpt.storage.put_if_absent("sources/0/0", b'\x00v1\n{"t":{"0":4}}')
    ckpt.storage.put_if_absent("sources/1/0", f"v1\n{_entry('f.json', 0)}".encode())
    assert ckpt.start_offsets(0) == {"0": '{"t":{"0":4}}'}  # source 2 recorded none: its start is unknown
    ckpt.storage.put_if_absent("offsets/1", "\n".join(["v1", META, '{"t":{"0":12}}', '{"logOffset":0}', "-"]).encode())
    assert ckpt.start_offsets(1) == {"0": '{"t":{"0":10}}', "1": '{"logOffset":0}', "2": '{"u":{"0":3}}'}
    assert ckpt.start_offsets(3) is None  # batch 2's offsets are gone
