"""The tests' Kafka stand-in reports a planned range whose records are gone as data loss, as
Kafka's source does: a partition of a deleted or recreated topic that no longer exists, or has
fewer records than a batch planned before a crash (the explorer's seed 37745 met a
``FileNotFoundError`` there instead)."""

from __future__ import annotations

import pytest

from streaming_exactly_once.testing.fake_kafka import _Reader, produce


def _reader(root, fail_on_data_loss: bool) -> _Reader:
    return _Reader({"path": str(root), "subscribe": "a", "failOnDataLoss": str(fail_on_data_loss).lower()})


def test_a_planned_partition_that_is_gone_is_data_loss(tmp_path):
    produce(tmp_path, "a", 0, ["x", "y"])
    produce(tmp_path, "a", 1, ["z"])
    start, end = {"a": {"0": 0, "1": 0}}, {"a": {"0": 2, "1": 1}}
    (tmp_path / "a" / "1").unlink()  # the topic was recreated with one partition
    with pytest.raises(RuntimeError, match=r"offsets 0\.\.1 of a/1 are gone: .*retained: 0\.\.0; failOnDataLoss=true\)"):
        _reader(tmp_path, True).partitions(start, end)
    ranges = _reader(tmp_path, False).partitions(start, end)
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [("a", 0, 0, 2)]


def test_a_planned_range_past_a_recreated_partitions_end_is_data_loss(tmp_path):
    produce(tmp_path, "a", 0, ["x", "y", "z"])
    start, end = {"a": {"0": 1}}, {"a": {"0": 3}}
    (tmp_path / "a" / "0").write_text("x\n")  # recreated: one record
    with pytest.raises(RuntimeError, match=r"retained: 0\.\.1"):
        _reader(tmp_path, True).partitions(start, end)
    assert _reader(tmp_path, False).partitions(start, end) == []
    produce(tmp_path, "a", 0, ["y2", "z2", "w2"])  # it grows back: the planned range reads again
    ((r,),) = [_reader(tmp_path, False).partitions(start, end)]
    assert (r.start, r.end) == (1, 3)
