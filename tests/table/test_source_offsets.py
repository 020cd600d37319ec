"""The high-water marks of partitioned sources (``table.source_offsets``) as pure functions: what a
table holds of each partition, where a batch starts, and when a partition's offsets restarted."""

from __future__ import annotations

import pytest

from streaming_exactly_once.table.offsets_log import OffsetsRecord
from streaming_exactly_once.table.source_offsets import (
    check_start,
    high_water,
    merged_ends,
    merged_starts,
    raise_to,
    restarted,
    table_marks,
)


def test_a_lower_end_never_lowers_a_partitions_mark():
    """A second query's batch re-read partition 0 below the mark (its rows there were dropped)
    and brought new rows of partition 1: it commits an end below partition 0's mark, which stays."""
    assert high_water([['{"t":{"0":100,"1":5}}'], ['{"t":{"0":40,"1":9}}']]) == {"t/0": 100, "t/1": 9}
    marks = {"t/0": 100}
    raise_to(marks, {"t/0": 40, "t/1": 9})
    assert marks == {"t/0": 100, "t/1": 9}


def test_a_partition_read_by_two_sources_has_been_read_up_to_the_higher_end_and_starts_at_the_lower():
    """One topic read twice (two sources of one query): either order of the sources."""
    assert merged_ends(['{"t":{"0":50}}', '{"t":{"0":80}}']) == {"t/0": 80}
    assert merged_ends(['{"t":{"0":80}}', None, '{"logOffset":3}', '{"t":{"0":50}}']) == {"t/0": 80}
    assert merged_starts(['{"t":{"0":80}}', '{"t":{"0":50}}']) == {"t/0": 50}
    assert merged_starts(['{"t":{"0":50}}', '{"t":{"0":80}}']) == {"t/0": 50}


def test_a_start_is_compared_with_the_marks_partition_by_partition():
    check = check_start({"t/0": 3, "t/1": 9, "t/2": 5, "u/0": 1}, {"t/0": 5, "t/1": 5, "t/2": 5})
    assert check.overlaps == {"t/0": (3, 5)} and check.gaps == {"t/1": (5, 9)}


def _record(batch: int, query: str, ends: str, resets: dict[str, int] | None = None) -> OffsetsRecord:
    return OffsetsRecord(batch, query, batch, 1, "a", source_offsets=(ends,), offset_resets=resets or {})


def test_a_reset_restarts_a_partitions_mark_whatever_compaction_kept():
    """Query a read t/0 up to 100; the topic was recreated and query b wrote its new records from
    0 (a reset at batch 1), then went on. A compact file keeps each query's latest record only:
    the marks must be the same from every subset that holds those."""
    history = [
        _record(0, "a", '{"t":{"0":100,"1":7}}'),
        _record(1, "b", '{"t":{"0":30,"1":7}}', {"t/0": 1}),
        _record(2, "b", '{"t":{"0":50,"1":8}}', {"t/0": 1}),  # b carries its reset in each later record
    ]
    assert table_marks(history) == {"t/0": 50, "t/1": 8}
    assert table_marks([history[0], history[2]]) == {"t/0": 50, "t/1": 8}  # after the fold: latest per query
    assert table_marks(reversed(history)) == {"t/0": 50, "t/1": 8}  # order of the records read does not matter
    # a later query that did not see the reset (its records carry none) still raises the mark, and
    # one that re-read below it (its rows there dropped) does not lower it
    assert table_marks([*history, _record(3, "c", '{"t":{"0":60}}')])["t/0"] == 60
    assert table_marks([*history, _record(3, "c", '{"t":{"0":40,"1":9}}')]) == {"t/0": 50, "t/1": 9}


def test_raising_marks_batch_by_batch_agrees_with_the_fold():
    marks = {"t/0": 100}
    raise_to(marks, {"t/0": 30}, {"t/0"})
    assert marks == {"t/0": 30}
    raise_to(marks, {"t/0": 20})
    assert marks == {"t/0": 30}


@pytest.mark.parametrize(
    ("start", "end", "own", "expected"),
    [
        ({"t/0": 100}, {"t/0": 10}, {}, {"t/0"}),  # Spark's source found the partition behind: the batch ends below its start
        ({"t/0": 10}, {"t/0": 50}, {"t/0": 100}, {"t/0"}),  # the same query had read it up to 100
        ({"t/0": 100}, {"t/0": 120}, {"t/0": 100}, set()),  # it continues where it was
        ({}, {"t/0": 10}, {"t/0": 100}, set()),  # no known start: the rows and the records decide
        ({"t/0": 5, "t/1": 9}, {"t/0": 9, "t/1": 12}, {"t/0": 5, "t/1": 10}, {"t/1"}),
    ],
)
def test_offsets_that_went_back_are_a_restart(start, end, own, expected):
    assert restarted(start, end, own) == expected
