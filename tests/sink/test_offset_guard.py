"""The offset guard on plain DataFrames (``sink.offset_guard``, ``sink.record_probe``): which rows
of a batch are dropped, kept or refused against given marks and the table's records."""

from __future__ import annotations

import pytest

from streaming_exactly_once.errors import OffsetGapError, OffsetResetError
from streaming_exactly_once.sink.offset_guard import OffsetColumns, OffsetGuard
from streaming_exactly_once.sink.record_probe import RecordProbe

pytestmark = pytest.mark.spark

SCHEMA = "id string, topic string, partition int, offset long"


def guard(df, *, start, marks, end=None, probe=None, known=False, own=None):
    return OffsetGuard(
        df,
        end=end or {"t/0": 8},
        start=start,
        marks=marks,
        own_ends=own or {},
        known_query=known,
        columns=OffsetColumns(),
        allow_gaps=False,
        table="file:///t",
        query_id="q",
        batch_id=0,
        probe=probe,
    )


def test_rows_without_a_full_coordinate_are_kept_and_rows_below_the_mark_dropped_and_counted(spark):
    """A union with another source gives rows whose topic, partition or offset is null: they are
    no partition's records, so no mark drops them (and they are never dropped uncounted)."""
    rows = [("a", "t", 0, 1), ("b", "t", 0, 7), ("c", None, None, None), ("d", "t", None, 2), ("e", None, 0, 3)]
    g = guard(spark.createDataFrame(rows, SCHEMA), start={"t/0": 0}, marks={"t/0": 5})
    assert sorted(r.id for r in g.df.collect()) == ["b", "c", "d", "e"]
    assert g.skipped_rows() == 1


def test_a_start_the_source_did_not_record_is_read_from_the_rows_never_taken_as_the_end(spark):
    rows = [("a", "t", 0, 3), ("b", "t", 0, 6), ("c", None, None, None)]
    g = guard(spark.createDataFrame(rows, SCHEMA), start={}, marks={"t/0": 5})  # from the rows: starts at 3
    assert sorted(r.id for r in g.df.collect()) == ["b", "c"]
    with pytest.raises(OffsetGapError, match=r"t/0 \[5, 8\) beyond .* cannot tell where it started"):
        guard(spark.createDataFrame([("c", None, None, None)], SCHEMA), start={}, marks={"t/0": 5})  # no rows of t/0
    assert guard(spark.createDataFrame([("c", None, None, None)], SCHEMA), start={}, marks={"t/0": 5}, known=True).resets == set()


def _probe(spark, held, columns=None):
    table = spark.createDataFrame(held, SCHEMA)
    return RecordProbe(project=lambda df: df, table_rows=lambda session, schema: table, columns=columns)


@pytest.mark.parametrize(
    ("at_4", "dropped", "resets"),
    [("x", ["a", "x"], set()), ("y", [], {"t/0"})],
)
def test_the_record_below_the_mark_tells_a_re_read_from_new_records(spark, at_4, dropped, resets):
    """The batch's highest offset below the mark (4, not 7 above it) is compared with the table's
    row there: the same record - a re-read, dropped; another - a recreated topic, written."""
    batch = [("a", "t", 0, 1), (at_4, "t", 0, 4), ("z", "t", 0, 7)]
    probe = _probe(spark, [("a", "t", 0, 1), ("x", "t", 0, 4)])
    g = guard(spark.createDataFrame(batch, SCHEMA), start={"t/0": 0}, marks={"t/0": 5}, probe=probe)
    assert g.resets == resets
    assert sorted({"a", at_4, "z"} - {r.id for r in g.df.collect()}) == dropped


def test_a_record_that_agrees_in_some_columns_only_is_refused_unless_record_columns_name_them(spark):
    schema = SCHEMA + ", run string"
    table = spark.createDataFrame([("a", "t", 0, 1, "run-1")], schema)
    batch = spark.createDataFrame([("a", "t", 0, 1, "run-2")], schema)
    probe = RecordProbe(project=lambda df: df, table_rows=lambda session, s: table)
    with pytest.raises(OffsetResetError, match="t/0 at offset 1: 'run' differ"):
        guard(batch, start={"t/0": 0}, marks={"t/0": 5}, probe=probe)
    named = RecordProbe(project=lambda df: df, table_rows=lambda session, s: table, columns=("id",))
    g = guard(batch, start={"t/0": 0}, marks={"t/0": 5}, probe=named)
    assert g.df.count() == 0 and g.resets == set()


def test_a_known_query_whose_offsets_went_back_writes_its_records(spark):
    batch = spark.createDataFrame([("new", "t", 0, 1)], SCHEMA)
    g = guard(batch, start={"t/0": 1}, end={"t/0": 2}, marks={"t/0": 9}, known=True, own={"t/0": 9})
    assert g.resets == {"t/0"} and [r.id for r in g.df.collect()] == ["new"]


def test_a_column_null_on_either_side_is_no_evidence(spark):
    """A column the table gained after the row was written reads null there; a re-read record
    that has it is still the same record."""
    schema = SCHEMA + ", added string"
    table = spark.createDataFrame([("a", "t", 0, 1, None)], schema)
    batch = spark.createDataFrame([("a", "t", 0, 1, "now-known")], schema)
    probe = RecordProbe(project=lambda df: df, table_rows=lambda session, s: table)
    g = guard(batch, start={"t/0": 0}, marks={"t/0": 5}, probe=probe)
    assert g.df.count() == 0 and g.resets == set()


def test_a_known_query_re_reading_the_tables_records_below_its_own_end_drops_them(spark):
    """A checkpoint whose offsets were put back (a partial restore) starts below the query's own
    last end as a recreated topic does: the record there is the table's, so it is a re-read."""
    batch = spark.createDataFrame([("x", "t", 0, 4), ("new", "t", 0, 9)], SCHEMA)
    probe = _probe(spark, [("x", "t", 0, 4)])
    g = guard(batch, start={"t/0": 4}, end={"t/0": 10}, marks={"t/0": 9}, known=True, own={"t/0": 9}, probe=probe)
    assert g.resets == set() and [r.id for r in g.df.collect()] == ["new"] and g.dropped_below == {"t/0": 9}
    other = _probe(spark, [("old", "t", 0, 4)])  # a recreated topic: another record there
    g = guard(batch, start={"t/0": 4}, end={"t/0": 10}, marks={"t/0": 9}, known=True, own={"t/0": 9}, probe=other)
    assert g.resets == {"t/0"} and sorted(r.id for r in g.df.collect()) == ["new", "x"]
    unknown = _probe(spark, [("old", "t", 0, 2)])  # the table holds no record at 4: the offsets decide
    g = guard(batch, start={"t/0": 4}, end={"t/0": 10}, marks={"t/0": 9}, known=True, own={"t/0": 9}, probe=unknown)
    assert g.resets == {"t/0"} and sorted(r.id for r in g.df.collect()) == ["new", "x"]
