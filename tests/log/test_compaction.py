"""Compaction arithmetic, by table (Spark's documented cases) and by property."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from streaming_exactly_once.log.compaction import (
    all_valid_batches,
    deletable_below,
    derive_compact_interval,
    interval_from_file_names,
    interval_is_spark_safe,
    is_compaction_batch,
    next_compaction_batch,
    valid_batches_before_compaction,
)


@pytest.mark.parametrize(
    "batch_id, k, expected",
    [(0, 3, False), (2, 3, True), (5, 3, True), (6, 3, False), (9, 10, True), (10, 10, False), (0, 1, True)],
)
def test_is_compaction_batch(batch_id, k, expected):
    assert is_compaction_batch(batch_id, k) is expected


@pytest.mark.parametrize(
    "compaction_id, k, expected",
    [(2, 3, [0, 1]), (5, 3, [2, 3, 4]), (9, 10, list(range(9))), (19, 10, list(range(9, 19)))],
)
def test_valid_batches_before_compaction(compaction_id, k, expected):
    assert list(valid_batches_before_compaction(compaction_id, k)) == expected


def test_valid_batches_before_compaction_rejects_delta():
    with pytest.raises(ValueError):
        valid_batches_before_compaction(4, 3)


@pytest.mark.parametrize(
    "latest, k, expected",
    [(0, 3, [0]), (1, 3, [0, 1]), (2, 3, [2]), (4, 3, [2, 3, 4]), (7, 3, [5, 6, 7]), (12, 10, [9, 10, 11, 12]), (5, 10, [0, 1, 2, 3, 4, 5])],
)
def test_all_valid_batches(latest, k, expected):
    assert list(all_valid_batches(latest, k)) == expected


@pytest.mark.parametrize("batch_id, k, expected", [(0, 3, 2), (2, 3, 5), (9, 10, 19), (12, 10, 19), (-1, 10, 9)])
def test_next_compaction_batch(batch_id, k, expected):
    assert next_compaction_batch(batch_id, k) == expected


@pytest.mark.parametrize(
    "default, latest_compact, expected",
    [
        (5, 11, 6),  # Spark's own example: 11.compact with default 5 -> 6
        (10, 9, 10),
        (3, 5, 6),  # the case observed in the reference (E): retain 2 left only 5.compact
        (10, 19, 20),  # k=10 with only 19.compact left derives 20: why we keep two compacts
        (10, 99, 10),
        (2, 2, 3),
        (4, 7, 8),
    ],
)
def test_derive_compact_interval(default, latest_compact, expected):
    assert derive_compact_interval(default, latest_compact) == expected


def test_interval_from_file_names():
    assert interval_from_file_names([], 10) == 10
    assert interval_from_file_names([5], 3) == 6
    assert interval_from_file_names([2, 5, 8], 10) == 3
    assert interval_from_file_names([29, 19], 7) == 10


@pytest.mark.parametrize("k, safe", [(1, True), (3, True), (10, True), (11, False), (20, False)])
def test_interval_is_spark_safe(k, safe):
    assert interval_is_spark_safe(k) is safe


def test_deletable_below_spark_defaults():
    # k=10, retain 100: nothing before batch 109; at 109 Spark deletes 0..8 (below 9.compact)
    assert deletable_below(107, 10, 100) is None
    assert deletable_below(109, 10, 100) == 9
    assert deletable_below(219, 10, 100) == 119
    # small retention: Spark would keep only 5.compact; we keep 2.compact too (two compacts)
    assert deletable_below(7, 3, 2) == 2


@given(k=st.integers(1, 30), current=st.integers(0, 2000), retain=st.integers(1, 300))
def test_deletion_keeps_a_readable_state_with_two_compacts(k, current, retain):
    threshold = deletable_below(current, k, retain)
    if threshold is None:
        return
    remaining = [b for b in range(current + 1) if b >= threshold]
    # every batch a reader may ask for in the retained window is readable
    for latest in range(max(0, current + 1 - retain), current + 1):
        assert set(all_valid_batches(latest, k)) <= set(remaining)
    # at least two compact files survive, so Spark derives k from their difference
    compacts = [b for b in remaining if is_compaction_batch(b, k)]
    assert len(compacts) >= 2
    assert interval_from_file_names(compacts, default=10) == k


@given(k=st.integers(1, 50), latest=st.integers(0, 5000))
def test_valid_batches_start_with_a_compact_or_zero(k, latest):
    ids = list(all_valid_batches(latest, k))
    assert ids[-1] == latest
    assert ids[0] == 0 or is_compaction_batch(ids[0], k)
    assert all(not is_compaction_batch(b, k) for b in ids[1:-1])
    assert next_compaction_batch(latest, k) > latest
    assert is_compaction_batch(next_compaction_batch(latest, k), k)


@given(default=st.integers(1, 40), k=st.integers(1, 40), n_compacts=st.integers(1, 6))
def test_derivation_agrees_with_writer_when_two_compacts_exist(default, k, n_compacts):
    compacts = [k * (i + 1) - 1 for i in range(n_compacts)]
    derived = interval_from_file_names(compacts, default)
    if n_compacts >= 2:
        assert derived == k
    elif k <= default:
        assert derived == k
