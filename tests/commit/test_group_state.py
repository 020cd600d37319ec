"""Group state (watermarks carried across batches, source partitions) and quality checks: pure logic."""

from __future__ import annotations

import json

import pytest

from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.log.codec import RecordError
from streaming_exactly_once.sink.checks import Check, mandatory_failures
from streaming_exactly_once.table.group_state import (
    ColumnWatermark,
    GroupState,
    PartitionOffsets,
    TableBatch,
    advance,
    advance_sources,
    expected_by_dataset,
)
from streaming_exactly_once.table.source_offsets import kafka_json, source_partitions


def batch(table, lo, hi, *, status="committed", batch_id=0, rows=10):
    return TableBatch(table, status, batch_id, rows, 1, 100, {"ts": {"min": lo, "max": hi}})


def as_json(tables):
    return GroupState(tables).datasets_json()


def test_absent_tables_keep_their_state_and_low_is_the_previous_high():
    s1 = advance({}, [batch("a", 1, 5), batch("b", 2, 4)], 0)
    s2 = advance(s1, [batch("b", 5, 9, batch_id=1)], 1)
    s3 = advance(s2, [batch("b", 10, 12, batch_id=2)], 2)
    assert s3["a"] == s1["a"]  # untouched for two batches
    j = as_json(s3)
    assert j["a"]["watermarks"]["ts"] == {"low": None, "high": 5, "batchMin": 1, "batchMax": 5}
    assert j["b"]["watermarks"]["ts"] == {"low": 9, "high": 12, "batchMin": 10, "batchMax": 12}
    assert j["b"]["rows"] == 30 and j["b"]["lastGroupBatch"] == 2 and j["a"]["lastGroupBatch"] == 0
    assert s3["b"].rows == 30 and s3["b"].watermarks["ts"] == ColumnWatermark(9, 12, 10, 12)


def test_a_late_batch_never_moves_the_high_watermark_back():
    s = as_json(advance(advance({}, [batch("a", 10, 20)], 0), [batch("a", 1, 3, batch_id=1)], 1))
    assert s["a"]["watermarks"]["ts"]["high"] == 20 and s["a"]["watermarks"]["ts"]["batchMax"] == 3


def test_a_rejected_batch_keeps_the_watermark_and_counts_rows():
    s = as_json(advance(advance({}, [batch("a", 1, 5)], 0), [batch("a", 6, 9, status="rejected", batch_id=0)], 1))
    assert s["a"]["status"] == "rejected" and s["a"]["watermarks"]["ts"]["high"] == 5
    assert s["a"]["batchId"] == 0 and s["a"]["rejectedRows"] == 10


def test_state_bytes_keep_the_key_order_of_a_carried_entry():
    rejected = advance({}, [batch("a", 1, 5, status="rejected")], 0)
    assert list(as_json(rejected)["a"]) == ["lastGroupBatch", "status", "checks", "rejectedRows", "watermarks"]
    committed = advance(rejected, [batch("a", 1, 5, batch_id=3)], 1)
    order = ["lastGroupBatch", "status", "checks", "rejectedRows", "watermarks", "batchId", "rows"]
    assert list(as_json(committed)["a"]) == order
    text = json.dumps({"datasets": as_json(committed)})
    again = GroupState.from_json(json.loads(text)["datasets"])
    assert json.dumps({"datasets": again.datasets_json()}) == text
    newer = GroupState.from_json({"a": {"batchId": 1, "future": {"x": 1}, "rows": 2}})
    moved = advance(newer.tables, [batch("a", 1, 5, batch_id=2)], 3)
    assert list(as_json(moved)["a"]) == ["batchId", "future", "rows", "lastGroupBatch", "status", "checks", "watermarks"]
    assert as_json(moved)["a"]["future"] == {"x": 1}  # a newer release's key is carried forward
    fresh = advance({}, [batch("b", 1, 5)], 0)
    assert list(as_json(fresh)["b"]) == ["lastGroupBatch", "status", "checks", "batchId", "rows", "watermarks"]


def test_what_a_batch_does_not_touch_keeps_its_bytes():
    """Red team (#17): the typed state rewrote untouched watermark columns and source partitions,
    dropping a newer release's keys in them and writing absent keys as null."""
    stored = {
        "a": {"batchId": 0, "rows": 3, "quarantinedRows": None, "watermarks": {"ts": {"high": 5, "tz": "UTC"}}},
        "b": {
            "batchId": 0,
            "rows": 1,
            "watermarks": {"ts": {"low": 1, "high": 2, "batchMin": 1, "batchMax": 2}, "day": {"high": "2024-05-01", "note": "kept"}},
        },
    }
    sources = {"0": {"t/0": {"low": 1, "high": 2, "lag": 7}, "t/1": {"high": 9}}}
    state = GroupState.from_json(stored, sources)
    moved = advance(state.tables, [batch("b", 3, 4, batch_id=1)], 1)  # "a" untouched, "b"'s "day" untouched
    out = GroupState(moved, {}, advance_sources(state.sources, {"0": {"t/1": 12}})).datasets_json()
    assert out["a"] == stored["a"]
    assert out["b"]["watermarks"]["day"] == {"high": "2024-05-01", "note": "kept"}
    assert out["b"]["watermarks"]["ts"] == {"low": 2, "high": 4, "batchMin": 3, "batchMax": 4}
    offsets = GroupState(moved, {}, advance_sources(state.sources, {"0": {"t/1": 12}})).sources_json()
    assert offsets == {"0": {"t/0": {"low": 1, "high": 2, "lag": 7}, "t/1": {"low": 9, "high": 12}}}


def test_group_state_decoding_is_strict():
    with pytest.raises(RecordError, match="field 'batchId' must be an integer"):
        GroupState.from_json({"a": {"batchId": "1"}})
    with pytest.raises(RecordError, match="field '_quarantine/rows/a' must be an integer"):
        GroupState.from_json({"_quarantine": {"_quarantine/rows/a": True}})
    with pytest.raises(RecordError, match="field '_quarantine' must be an object"):
        GroupState.from_json({"_quarantine": [1]})
    with pytest.raises(RecordError, match="expected a JSON object"):
        GroupState.from_json({"a": 1})
    with pytest.raises(RecordError, match="missing field 'high'"):
        GroupState.from_json({}, {"0": {"orders/0": {"low": 1}}})
    state = GroupState.from_json({"a": {"batchId": 1}, "_quarantine": {"_quarantine/rows/a": 2}}, {"0": {"t/0": {"low": None, "high": 3}}})
    assert state.latest_batch("a") == 1 and state.latest_batch("_quarantine/rows/a") == 2 and state.latest_batch("b") == -1
    assert state.table_names() == ["_quarantine/rows/a", "a"]
    assert state.sources_json() == {"0": {"t/0": {"low": None, "high": 3}}}


def test_kafka_offsets_give_partition_watermarks_and_starting_offsets():
    offsets = [json.dumps({"orders": {"0": 120, "1": 95}, "payments": {"0": 7}}), '{"logOffset":3}', None]
    ends = source_partitions(offsets)
    assert ends == {"0": {"orders/0": 120, "orders/1": 95, "payments/0": 7}}
    s1 = advance_sources({}, ends)
    s2 = advance_sources(s1, {"0": {"orders/0": 180}})
    assert s2["0"]["orders/0"] == PartitionOffsets(low=120, high=180)
    assert s2["0"]["payments/0"] == PartitionOffsets(low=None, high=7)  # absent partitions kept
    assert GroupState(sources=s2).sources_json()["0"]["orders/0"] == {"low": 120, "high": 180}
    assert json.loads(kafka_json({p: o.high for p, o in s2["0"].items()})) == {"orders": {"0": 180, "1": 95}, "payments": {"0": 7}}
    assert expected_by_dataset(ends, ["orders"]) == {"orders": {"orders/0": 120, "orders/1": 95}}


def test_every_check_type():
    metrics = {"rows": 10, "nulls": {"v": 2}, "fields": {"id": "bigint", "v": "double"}}
    assert Check.rows_between(1, 10).evaluate(metrics).passed
    assert not Check.rows_between(11, None).evaluate(metrics).passed
    assert Check.null_fraction("v", at_most=0.2).evaluate(metrics).passed
    assert not Check.null_fraction("v", at_most=0.1).evaluate(metrics).passed
    assert Check.schema("id LONG, v DOUBLE").evaluate(metrics).passed
    failed = Check.schema("id INT").evaluate(metrics)
    assert not failed.passed and "id expected int, found bigint" in failed.detail
    broken = Check.batch(lambda m: 1 / 0, name="broken").evaluate(metrics)
    assert not broken.passed and "ZeroDivisionError" in broken.detail
    optional = Check.batch(lambda m: False, name="opt", mandatory=False).evaluate(metrics)
    assert mandatory_failures([optional, broken]) == [broken]
    with pytest.raises(ValueError):
        Check.row("v > 0").evaluate(metrics)
    with pytest.raises(ConfigError):
        Check.row("  ")
    with pytest.raises(ConfigError):
        Check.null_fraction("v", at_most=2)
