"""Every declared record round-trips through ``log.record_fields``, in its on-disk key order,
and decoding is as strict as the hand-written codecs were."""

from __future__ import annotations

import json
from dataclasses import dataclass, field as dc_field, replace
from typing import Any

import pytest

from streaming_exactly_once.checkpoint.file_source_log import FileSourceEntry
from streaming_exactly_once.commit.protocol.attempt_verdict import AttemptVerdict
from streaming_exactly_once.commit.protocol.lease import Heartbeat, WriterInfo
from streaming_exactly_once.commit.protocol.sequence import CommitSequence
from streaming_exactly_once.commit.protocol.step import REGISTRY
from streaming_exactly_once.commit.protocol.steps import (
    CleanupStaging,
    FileMove,
    MemberPublish,
    MoveFiles,
    PublishManifest,
    PublishMembers,
    WriteCommit,
    WriteOffsets,
    WriteSources,
)
from streaming_exactly_once.commit.rewrites.data_compaction import Rewrite
from streaming_exactly_once.commit.table_steps.format_step import CommitDelta
from streaming_exactly_once.delta.files import DeltaFile
from streaming_exactly_once.delta.target import DeltaSettings
from streaming_exactly_once.log.codec import RecordError, non_negative, path_value
from streaming_exactly_once.log.record_fields import DataclassCodec, decode, encode, json_field
from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.table.attempt_key import AttemptKey
from streaming_exactly_once.table.commits_log import CommitRecord
from streaming_exactly_once.table.group_state import ColumnWatermark, DatasetState, PartitionOffsets
from streaming_exactly_once.table.identity import TableIdentity
from streaming_exactly_once.table.offsets_log import OffsetsRecord
from streaming_exactly_once.table.sources_log import SourceFileRecord

ENTRY = ManifestEntry.for_file("file:///t/day=1/part-0.parquet", size=903, modification_time=1795313165250)
COMMIT = CommitRecord.of(
    AttemptKey(12, "q", 40, 3, "9f2c41d0", "rename"),
    num_files=4,
    num_rows=20000,
    num_bytes=812345,
    commit_time_ms=1795313165400,
    step_ms={"stage": 812.4},
    watermarks={"ts": {"min": "a", "max": "b"}},
    source_files=1,
    committed_by_epoch=3,
    table_rows=240000,
    schema="{}",
)
OFFSETS = OffsetsRecord(12, "q", 40, 3, "9f2c41d0", "file:/chk", ('{"logOffset":40}', None), 0, 1795313165250, 1795313165301)
SOURCE = SourceFileRecord(12, 0, "file:///data/landing/in_00040.csv", 1795313160000)

RECORDS: list[Any] = [
    ENTRY,
    COMMIT,
    CommitRecord(
        key=AttemptKey(1, "q", 1, 1, "a", "direct"),
        num_files=0,
        num_rows=None,
        num_bytes=0,
        commit_time_ms=5,
        committed_by_epoch=2,
        reconstructed=True,
        datasets={"t": {"batchId": 0}},
        source_partitions={"0": {}},
        delta_version=7,
    ),
    OFFSETS,
    OffsetsRecord(1, "q", 1, 1, "a"),
    SOURCE,
    FileSourceEntry("file:///in/in_000.csv", 1700000000000, 0),
    WriterInfo(3, "w", "host", 12, None, 1000, "job", "boot", "ns", "app-1", "q"),
    Heartbeat(3, "w", 1000, 30000, released=True),
    AttemptVerdict("commit", 3, 1000),
    AttemptKey(12, "q", 40, 3, "9f2c41d0", "direct"),
    DatasetState(
        last_group_batch=7,
        status="committed",
        checks=[{"name": "c", "passed": True}],
        batch_id=5,
        rows=9,
        watermarks={"ts": ColumnWatermark("a", "b", "a", "b")},
        expected_high={"orders/0": 180},
    ),
    PartitionOffsets(low=None, high=180),
    TableIdentity("t-1", "file:///t", 1, 10, "parquet", ("p",), writer_options={"compression": "zstd"}),
    TableIdentity(
        "t-2",
        "file:///g",
        1,
        10,
        "delta",
        kind="group",
        group="..",
        other_root_uris=("s3a://b/g",),
        delta_app_id="streaming-exactly-once:t-2",
        spark_manifest=False,
    ),
]

STEPS: list[Any] = [
    MoveFiles(moves=[FileMove("_staging/a", "day=1/a", 10)]),
    PublishManifest(batch_id=12, entries=[ENTRY]),
    PublishManifest(batch_id=14, entries=[ENTRY], replaced=("file:///t/day=1/part-1.parquet",)),
    WriteSources(batch_id=12, files=[SOURCE]),
    WriteOffsets(record=OFFSETS),
    WriteCommit(record=COMMIT),
    PublishMembers(members=[MemberPublish(table="orders", batch_id=5, entries=[ENTRY], record=COMMIT)]),
    CleanupStaging(path="_staging/x/intents"),
    CommitDelta(
        batch_id=12,
        app_id="streaming-exactly-once:x",
        files=[DeltaFile("day=1/a.parquet", 903, 5)],
        partition_by=("day",),
        schema=None,
        table="orders",
        settings=DeltaSettings(10, 2592000000),
        info={"queryId": "q"},
    ),
    CommitDelta(batch_id=1, app_id="a"),
    CommitDelta(batch_id=14, app_id="a", rewrites=[Rewrite("day=1/part-compacted-14.parquet", 2000, 5, 40, [("day=1/a.parquet", 903)])]),
]


def _through_bytes(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(obj, separators=(",", ":")))


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips(record):
    assert decode(type(record), _through_bytes(encode(record))) == record
    assert DataclassCodec(type(record)).from_json(_through_bytes(DataclassCodec(type(record)).to_json(record))) == record


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.kind)
def test_every_wal_step_round_trips_with_kind_first(step):
    obj = _through_bytes(step.to_json())
    assert next(iter(obj)) == "kind"
    assert REGISTRY[obj["kind"]].from_json(obj) == step


def test_the_wal_header_is_the_attempt_key_inline():
    seq = CommitSequence(
        key=AttemptKey(12, "q", 40, 3, "9f2c41d0", "rename"),
        staging_dir="_seo/staging/12-9f2c41d0-e3",
        created_ms=1795313165300,
        steps=[CleanupStaging(path="p")],
    )
    assert seq.to_bytes().decode().splitlines()[1] == (
        '{"batchId":12,"queryId":"q","sparkBatchId":40,"epoch":3,"attempt":"9f2c41d0","mode":"rename",'
        '"stagingDir":"_seo/staging/12-9f2c41d0-e3","createdMs":1795313165300}'
    )
    assert CommitSequence.from_bytes(seq.to_bytes(), path="wal/12", batch_id=12) == seq
    assert COMMIT.key == AttemptKey(12, "q", 40, 3, "9f2c41d0", "rename") and COMMIT.batch_id == 12


def test_key_order_and_omissions_are_the_on_disk_format():
    assert json.dumps(encode(ENTRY), separators=(",", ":")) == (
        '{"path":"file:///t/day=1/part-0.parquet","size":903,"isDir":false,"modificationTime":1795313165250,'
        '"blockReplication":1,"blockSize":33554432,"action":"add"}'
    )
    assert list(encode(COMMIT)) == [
        "batchId",
        "queryId",
        "sparkBatchId",
        "epoch",
        "attempt",
        "mode",
        "numFiles",
        "numRows",
        "numBytes",
        "numSkippedRows",
        "commitTimeMs",
        "stepMs",
        "watermarks",
        "sourceFiles",
        "committedByEpoch",
        "tableRows",
        "schema",
    ]
    assert encode(replace(COMMIT, committed_by_epoch=None))["committedByEpoch"] == 3  # None: written as the epoch
    assert encode(OffsetsRecord(1, "q", 1, 1, "a"))["checkpoint"] is None  # null, not left out
    assert encode(TableIdentity("t", "file:///t", 1, 10, "parquet")) == {
        "tableId": "t",
        "rootUri": "file:///t",
        "createdMs": 1,
        "compactInterval": 10,
        "format": "parquet",
        "partitionBy": [],
        "firstBatchId": 0,
        "writerOptions": {},
    }
    delta = encode(RECORDS[-1])
    assert list(delta)[-5:] == ["kind", "group", "otherRootUris", "delta", "sparkManifest"]
    assert delta["delta"] == {"appId": "streaming-exactly-once:t-2"}
    assert CommitDelta(batch_id=1, app_id="a").to_json() == {
        "kind": "delta",
        "batchId": 1,
        "appId": "a",
        "partitionBy": [],
        "schema": None,
        "files": [],
        "checkpointInterval": 10,
        "info": {},
    }


def _good_source() -> dict[str, Any]:
    return encode(SOURCE)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda o: o.pop("path"), "missing field 'path'"),
        (lambda o: o.update(batchId="12"), "field 'batchId' must be an integer"),
        (lambda o: o.update(batchId=True), "field 'batchId' must be an integer"),
        (lambda o: o.update(timestamp=2**63), "outside the 64-bit range"),
        (lambda o: o.update(timestamp=-(2**63) - 1), "outside the 64-bit range"),
        (lambda o: o.update(path=None), "missing field 'path'"),
    ],
)
def test_decoding_is_strict(change, message):
    obj = _good_source()
    change(obj)
    with pytest.raises(RecordError, match=message):
        decode(SourceFileRecord, obj)


def test_64_bit_bounds_are_accepted():
    obj = _good_source()
    obj["timestamp"] = 2**63 - 1
    assert decode(SourceFileRecord, obj).timestamp == 2**63 - 1


def test_checks_of_declared_fields():
    with pytest.raises(RecordError, match="NUL"):
        decode(ManifestEntry, {**encode(ENTRY), "path": "file:///t/a\x00b"})
    with pytest.raises(RecordError, match="must not be negative"):
        decode(ManifestEntry, {**encode(ENTRY), "size": -1})
    with pytest.raises(RecordError, match="field 'verdict' must be 'commit' or 'abort', not 'maybe'"):
        decode(AttemptVerdict, {"verdict": "maybe", "epoch": 1, "writtenMs": 1})
    with pytest.raises(RecordError, match="field 'partitionBy' must be a list of strings"):
        decode(TableIdentity, {**encode(RECORDS[-2]), "partitionBy": [1]})
    with pytest.raises(RecordError, match="expected a JSON object"):
        PublishManifest.from_json({"kind": "manifest", "batchId": 1, "entries": [[1]]})
    with pytest.raises(RecordError, match="triples"):
        MoveFiles.from_json({"kind": "move", "moves": [["a", "b"]]})
    with pytest.raises(RecordError, match="not a path inside the table"):
        MoveFiles.from_json({"kind": "move", "moves": [["../a", "b", 1]]})
    with pytest.raises(RecordError, match="missing field 'isDir'"):
        PublishManifest.from_json({"kind": "manifest", "batchId": 1, "entries": [{"path": "file:///x", "size": 1}]})


def test_unknown_fields_are_ignored_and_optional_ones_default():
    obj = {**encode(OffsetsRecord(1, "q", 1, 1, "a")), "future": 1}
    for key in ("checkpoint", "sourceOffsets", "batchWatermarkMs", "writtenMs"):
        del obj[key]
    assert decode(OffsetsRecord, obj) == OffsetsRecord(1, "q", 1, 1, "a")
    info = encode(RECORDS[7])
    info["pidStart"] = None
    del info["bootId"]
    assert decode(WriterInfo, info).pid_start is None and decode(WriterInfo, info).boot_id is None


@dataclass(frozen=True)
class _Inner:
    n: int = dc_field(metadata=json_field("n", int, check=non_negative))


@dataclass(frozen=True)
class _Outer:
    path: str = dc_field(metadata=json_field("path", str, check=path_value))
    inner: _Inner = dc_field(metadata=json_field("inner", dict, record=_Inner))
    many: list[_Inner] = dc_field(default_factory=list, metadata=json_field("many", list, optional=True, record=_Inner))
    local: int = 0  # not declared: not in the JSON


def test_nested_records_and_lists_of_records():
    outer = _Outer("a", _Inner(1), [_Inner(2), _Inner(3)], local=5)
    obj = encode(outer)
    assert obj == {"path": "a", "inner": {"n": 1}, "many": [{"n": 2}, {"n": 3}]}
    assert decode(_Outer, obj) == _Outer("a", _Inner(1), [_Inner(2), _Inner(3)])
    with pytest.raises(RecordError, match="field 'n' must not be negative"):
        decode(_Outer, {"path": "a", "inner": {"n": -1}})
    with pytest.raises(RecordError, match="field 'inner' must be an object"):
        decode(_Outer, {"path": "a", "inner": [1]})
    with pytest.raises(RecordError, match="NUL"):
        decode(_Outer, {"path": "a\x00", "inner": {"n": 1}})
