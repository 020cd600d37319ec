"""Table schema enforcement and evolution with real Spark streams (``ExactlyOnceSink``).

Each run adds one input file and drains it with ``availableNow``; a run's stream may change
the schema (``shape``). What a user sees is asserted: the named error and when it comes (at
``start`` or at the batch), nothing left behind, and what every reader returns afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from streaming_exactly_once import ExactlyOnceSink, read
from streaming_exactly_once.errors import ConfigError, SchemaMismatchError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.schema_log import schema_history
from tests.datagen import write_csv_files
from tests.sink.conftest import assert_table_clean, stream

pytestmark = pytest.mark.spark

ROWS = 4


def feed(tmp_path: Path) -> list[int]:
    """One more input file (its ids)."""
    n = len(list((tmp_path / "in").glob("in_*.csv"))) if (tmp_path / "in").exists() else 0
    return write_csv_files(tmp_path / "in", n_files=1, rows_per_file=ROWS, start_file=n)


def run(spark, tmp_path: Path, shape=lambda df: df, *, foreach_batch: bool = False, **options):
    """Drain the input into ``tmp_path/t`` (``partition_by=["p"]``) through ``shape``; returns the
    query's error (None) - an error of ``start`` itself is raised. ``foreach_batch``: the sink
    as a plain ``foreachBatch`` callable, without ``start`` and its checks."""
    sink = ExactlyOnceSink(str(tmp_path / "t"), **{"partition_by": ["p"], **options})
    df = shape(stream(spark, tmp_path / "in", files_per_trigger=100))
    try:
        if foreach_batch:
            writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
            query = writer.trigger(availableNow=True).start()
        else:
            query = sink.start(df, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
        try:
            query.awaitTermination()
        except Exception as exc:  # StreamingQueryException wrapping the batch's error
            return exc
        return None
    finally:
        sink.close()


def ids_by_reader(spark, table: Path) -> dict[str, list]:
    """Each reader's rows as sorted (id, v) tuples, vanilla Spark's included."""
    t = str(table)
    return {
        "spark.read.parquet": sorted((r.id, r.v) for r in spark.read.parquet(t).collect()),
        "read.spark": sorted((r.id, r.v) for r in read.spark(t, spark).collect()),
        "read.pandas": sorted(zip(read.pandas(t)["id"].tolist(), read.pandas(t)["v"].tolist(), strict=True)),
        "read.polars": sorted(read.polars(t).select("id", "v").rows()),
        "read.duckdb": sorted(read.duckdb(t).project("id, v").fetchall()),
    }


def test_a_type_change_is_refused_and_the_table_still_reads(spark, tmp_path):
    first = feed(tmp_path)
    assert run(spark, tmp_path) is None
    feed(tmp_path)
    as_string = lambda df: df.withColumn("id", F.col("id").cast("string"))  # noqa: E731
    # at start(): the query never runs, and the table is free for the next writer at once
    with pytest.raises(SchemaMismatchError) as err:
        run(spark, tmp_path, as_string)
    assert "column 'id' is string in the batch, long in the table" in str(err.value)
    assert str(err.value).splitlines()[2].split()[:3] == ["id", "long", "string"]
    assert sorted(p.name for p in (tmp_path / "ckpt" / "offsets").iterdir() if p.name.isdigit()) == ["0"]
    other = ExactlyOnceSink(str(tmp_path / "t"), partition_by=["p"], lease_timeout="60s")
    other.open()  # a held lease would refuse it (ConcurrentWriterError): the refused start released it
    other.close()
    # the same stream as a plain foreachBatch: refused at its batch, before anything is staged
    error = run(spark, tmp_path, as_string, foreach_batch=True)
    assert error is not None and "SchemaMismatchError" in str(error) and "Nothing was written" in str(error)
    assert_table_clean(tmp_path / "t")  # no WAL, no staging, no orphan file
    expected = sorted((i, i * 0.5) for i in first)
    seen = ids_by_reader(spark, tmp_path / "t")
    assert seen == dict.fromkeys(seen, expected)
    assert verify_table(open_storage(str(tmp_path / "t"))).problems == []


def test_a_new_column_needs_add_columns_and_every_reader_sees_it(spark, tmp_path):
    first = feed(tmp_path)
    assert run(spark, tmp_path) is None
    second = feed(tmp_path)
    extra = lambda df: df.withColumn("extra", F.concat(F.lit("x"), F.col("id").cast("string")))  # noqa: E731
    with pytest.raises(SchemaMismatchError, match="schema_evolution='add_columns'"):
        run(spark, tmp_path, extra)
    assert run(spark, tmp_path, extra, schema_evolution="add_columns") is None
    table = str(tmp_path / "t")
    history = schema_history(open_storage(table))
    assert [(r.batch_id, r.reason, r.changes) for r in history] == [(0, "create", ()), (1, "evolve", ("added column 'extra' (string)",))]
    want = sorted([(i, None) for i in first] + [(i, f"x{i}") for i in second])
    assert sorted((r.id, r.extra) for r in read.spark(table, spark).collect()) == want
    assert sorted((r.id, r.extra) for r in spark.read.option("mergeSchema", "true").parquet(table).collect()) == want
    assert sorted(zip(read.pandas(table)["id"], read.pandas(table)["extra"].where(lambda s: s.notna(), None), strict=True)) == want
    assert sorted(read.polars(table).select("id", "extra").rows()) == want
    assert sorted(read.duckdb(table).project("id, extra").fetchall()) == want
    assert "extra" not in read.arrow(table, as_of=0).column_names and "extra" not in read.spark(table, spark, as_of=0).columns
    # a later batch without the column writes it as nulls, in any mode
    third = feed(tmp_path)
    assert run(spark, tmp_path) is None
    assert [r.extra for r in read.spark(table, spark).where(F.col("id").isin(third)).collect()] == [None] * ROWS
    assert len(schema_history(open_storage(table))) == 2


def test_widening_needs_add_and_widen_and_a_narrower_batch_is_cast(spark, tmp_path):
    as_float = lambda df: df.withColumn("v", F.col("v").cast("float")).withColumn("id", F.col("id").cast("int"))  # noqa: E731
    first = feed(tmp_path)
    assert run(spark, tmp_path, as_float) is None
    feed(tmp_path)
    with pytest.raises(SchemaMismatchError, match="a wider type needs schema_evolution='add_and_widen'"):
        run(spark, tmp_path, schema_evolution="add_columns")
    assert run(spark, tmp_path, schema_evolution="add_and_widen") is None  # id int -> long, v float -> double
    table = str(tmp_path / "t")
    assert [r.changes for r in schema_history(open_storage(table))][-1] == ("widened 'id': integer -> long", "widened 'v': float -> double")
    # the table is long/double now: an int/float batch is cast up, its files keep the table's types
    third = feed(tmp_path)
    assert run(spark, tmp_path, as_float) is None
    newest = max((tmp_path / "t").glob("p=*/*.parquet"), key=lambda f: f.stat().st_mtime)
    assert str(pq.read_schema(newest).field("id").type) == "int64"
    ids = sorted(first + third + [i for i in range(ROWS, 2 * ROWS)])
    assert sorted(r.id for r in read.spark(table, spark).collect()) == ids
    assert read.pandas(table)["v"].dtype == "float64" and sorted(read.pandas(table)["id"]) == ids
    # vanilla Spark is given the table's schema (mergeSchema cannot merge int and long)
    given = StructType.fromJson(json.loads(read.schema(table)))
    assert sorted(r.id for r in spark.read.schema(given).parquet(table).collect()) == ids


def test_other_partition_columns_are_refused_at_start(spark, tmp_path):
    feed(tmp_path)
    assert run(spark, tmp_path) is None
    feed(tmp_path)
    with pytest.raises(SchemaMismatchError, match=r"partitioned by \['p'\]"):
        run(spark, tmp_path, partition_by=["v"])
    with pytest.raises(SchemaMismatchError, match="column 'p' is integer in the batch, string in the table"):
        run(spark, tmp_path, lambda df: df.withColumn("p", F.length("p")))


def test_columns_named_by_options_are_checked_at_start(spark, tmp_path):
    feed(tmp_path)
    for options in ({"partition_by": ["day"]}, {"watermark_columns": ["ts"]}):
        with pytest.raises(ConfigError, match="not in the batch"):
            run(spark, tmp_path, **options)
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "t" / "_seo").exists()  # nothing ran, nothing touched
