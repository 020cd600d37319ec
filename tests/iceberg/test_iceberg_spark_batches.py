"""Spark's batches as they come, into ``format="iceberg"`` (and ``["delta", "iceberg"]``) tables:
Spark's default INT96 timestamps, columns Spark declares NOT NULL (``range``, literals) - a
partition column among them - followed by a batch where they may be null, and
``schema_evolution="add_columns"`` adding a NOT NULL column. Each batch is given to the sink as ``foreachBatch`` gives it
(``sink(df, batch_id)``); Iceberg readers are pyiceberg by path, and polars."""

from __future__ import annotations

import datetime
from collections import Counter

import pytest

from streaming_exactly_once import ExactlyOnceSink, read
from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage

pytestmark = pytest.mark.spark

FORMATS = [pytest.param("iceberg", id="iceberg"), pytest.param(["delta", "iceberg"], id="delta+iceberg")]
OUTPUT_TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"


def pyiceberg_rows(table, *columns: str) -> list[dict]:
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(str(table)).scan(selected_fields=columns).to_arrow().sort_by("id").to_pylist()


@pytest.mark.parametrize("fmt", FORMATS)
def test_spark_default_int96_timestamps_reach_the_iceberg_table_as_iceberg_reads_them(spark, tmp_path, fmt):
    """The session keeps Spark's default (INT96); the sink writes its own files as Iceberg stores
    timestamps, so the batch commits and every reader reads the same instants - dates beyond
    what nanoseconds hold included."""
    import pyarrow.parquet as pq

    assert spark.conf.get(OUTPUT_TIMESTAMP_TYPE) == "INT96"
    table = tmp_path / "t"
    df = spark.sql(
        "SELECT id, CASE WHEN id % 2 = 0 THEN TIMESTAMP'1500-03-01 00:00:00' ELSE TIMESTAMP'9999-12-31 23:59:00' END AS ts, 'a' AS p FROM range(4)"
    )
    sink = ExactlyOnceSink(str(table), format=fmt, partition_by=["p"], query_id="q")
    try:
        sink(df, 0)
    finally:
        sink.close()
    assert spark.conf.get(OUTPUT_TIMESTAMP_TYPE) == "INT96"  # the session's setting is untouched
    far = {0: datetime.datetime(1500, 3, 1, tzinfo=datetime.timezone.utc), 1: datetime.datetime(9999, 12, 31, 23, 59, tzinfo=datetime.timezone.utc)}
    assert [(r["id"], r["ts"]) for r in pyiceberg_rows(table, "id", "ts")] == [(i, far[i % 2]) for i in range(4)]
    files = [pq.read_metadata(p) for p in (table / "p=a").iterdir() if p.suffix == ".parquet"]
    assert files and {m.schema.column(i).physical_type for m in files for i in range(m.num_columns)} == {"INT64"}
    assert Counter(r.id for r in spark.read.parquet(str(table)).collect()) == Counter(range(4))
    assert sorted(read.arrow(str(table)).column("id").to_pylist()) == list(range(4))
    assert verify_table(open_storage(str(table))).problems == []


def test_a_writer_option_asking_an_iceberg_table_for_another_timestamp_layout_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="TIMESTAMP_MICROS"):
        ExactlyOnceSink(str(tmp_path / "t"), format="iceberg", writer_options={OUTPUT_TIMESTAMP_TYPE: "INT96"})
    with pytest.raises(ConfigError, match="TIMESTAMP_MICROS"):
        ExactlyOnceSink(str(tmp_path / "t"), format=["delta", "iceberg"], writer_options={OUTPUT_TIMESTAMP_TYPE.lower(): "timestamp_millis"})
    sink = ExactlyOnceSink(str(tmp_path / "t"), format="iceberg", writer_options={OUTPUT_TIMESTAMP_TYPE: "timestamp_micros"})
    assert sink.options.spark_writer_options() == {OUTPUT_TIMESTAMP_TYPE: "timestamp_micros"}
    plain = ExactlyOnceSink(str(tmp_path / "u"), writer_options={OUTPUT_TIMESTAMP_TYPE: "INT96"})  # not an Iceberg table: Spark's
    assert plain.options.spark_writer_options() == {OUTPUT_TIMESTAMP_TYPE: "INT96"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_not_null_columns_and_partition_columns_then_a_nullable_batch_every_reader_reads_them(spark, tmp_path, fmt):
    """Batch 0's ``id`` and partition column ``day`` are NOT NULL (as from ``range`` and a
    literal); batch 1's ``id`` holds a null. Both commit, and pyiceberg reads every row with its
    partition value (Spark's files do not hold ``day``: it must be optional in the Iceberg table)."""
    table = tmp_path / "t"
    first = spark.sql("SELECT id, DATE'2024-01-01' AS day FROM range(3)")
    later = spark.sql("SELECT CASE WHEN id = 1 THEN NULL ELSE id + 10 END AS id, DATE'2024-01-02' AS day FROM range(3)")
    assert [f.nullable for f in first.schema.fields] == [False, False]
    sink = ExactlyOnceSink(str(table), format=fmt, partition_by=["day"], query_id="q")
    try:
        sink(first, 0)
        assert [(r["id"], str(r["day"])) for r in pyiceberg_rows(table, "id", "day")] == [(i, "2024-01-01") for i in range(3)]
        sink(later, 1)
    finally:
        sink.close()
    rows = pyiceberg_rows(table, "id", "day")
    assert sorted((r["id"] if r["id"] is not None else -1, str(r["day"])) for r in rows) == [
        (-1, "2024-01-02"),
        (0, "2024-01-01"),
        (1, "2024-01-01"),
        (2, "2024-01-01"),
        (10, "2024-01-02"),
        (12, "2024-01-02"),
    ]
    assert sorted(map(str, read.arrow(str(table)).column("id").to_pylist())) == sorted(map(str, [0, 1, 2, 10, None, 12]))
    assert verify_table(open_storage(str(table))).problems == []


@pytest.mark.parametrize("fmt", [pytest.param("parquet", id="parquet"), *FORMATS])
def test_add_columns_adds_a_not_null_column_that_every_reader_reads(spark, tmp_path, fmt):
    """``schema_evolution="add_columns"`` on every format that documents it: batch 1 adds
    ``extra`` (NOT NULL, as ``id * 2`` is). The Iceberg table gains it in the batch's snapshot;
    its files hold it as nullable, so ``mergeSchema`` reads the older files (which lack it) too."""
    import pyarrow.parquet as pq

    table = tmp_path / "t"
    sink = ExactlyOnceSink(str(table), format=fmt, partition_by=["p"], schema_evolution="add_columns", query_id="q")
    try:
        sink(spark.sql("SELECT id, 'a' AS p FROM range(3)"), 0)
        later = spark.sql("SELECT id + 10 AS id, 'a' AS p, (id + 10) * 2 AS extra FROM range(3)")
        assert not later.schema["extra"].nullable
        sink(later, 1)
    finally:
        sink.close()
    expected = [(0, None), (1, None), (2, None), (10, 20), (11, 22), (12, 24)]
    merged = spark.read.option("mergeSchema", "true").parquet(str(table))
    assert sorted((r.id, r.extra) for r in merged.collect()) == expected
    newest = max((p for p in (table / "p=a").iterdir() if p.suffix == ".parquet"), key=lambda p: p.stat().st_mtime_ns)
    assert pq.read_metadata(newest).schema.column(1).max_definition_level == 1  # optional
    if fmt != "parquet":
        assert [(r["id"], r["extra"]) for r in pyiceberg_rows(table, "id", "extra")] == expected
    assert verify_table(open_storage(str(table))).problems == []
