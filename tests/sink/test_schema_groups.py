"""Each table of a dataset group enforces its own schema (``DatasetSink``, real Spark streams): a
batch that does not fit one table follows the commit policy - the whole batch fails (``full``) or
that table's batch is quarantined while the others publish (``partial``) - never half-published."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from streaming_exactly_once import DatasetSink, Output, read
from streaming_exactly_once.errors import SchemaMismatchError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.schema_log import schema_history
from tests.sink.conftest import stream
from tests.sink.test_schema import feed

pytestmark = pytest.mark.spark

#: "typed" casts v to double whatever the stream has; "raw" takes it as it comes
OUTPUTS = [Output("raw"), Output("typed", transform=lambda df: df.withColumn("v", F.col("v").cast("double")))]


def run_group(spark, tmp_path: Path, shape=lambda df: df, **options):
    sink = DatasetSink(str(tmp_path / "g"), outputs=OUTPUTS, **options)
    query = sink.start(
        shape(stream(spark, tmp_path / "in", files_per_trigger=100)), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True}
    )
    try:
        query.awaitTermination()
        return sink, None
    except Exception as exc:  # StreamingQueryException wrapping the batch's error
        return sink, exc
    finally:
        sink.close()


def ids(table: Path) -> list[int]:
    return sorted(read.arrow(str(table)).column("id").to_pylist())


def test_a_table_the_batch_does_not_fit_fails_it_or_is_quarantined(spark, tmp_path):
    first = feed(tmp_path)
    assert run_group(spark, tmp_path)[1] is None
    second = feed(tmp_path)
    as_text = lambda df: df.withColumn("v", F.col("v").cast("string"))  # noqa: E731
    # full: nothing of the batch is published, the named error says which table and why
    _, error = run_group(spark, tmp_path, as_text)
    assert error is not None and isinstance(error, SchemaMismatchError) and "Table 'raw'" in str(error)
    assert "column 'v' is string in the batch, double in the table" in str(error)
    g = tmp_path / "g"
    assert ids(g / "raw") == ids(g / "typed") == sorted(first)
    # partial: raw's batch goes to quarantine, typed's is published
    sink, error = run_group(spark, tmp_path, as_text, policy="partial")
    assert error is None
    assert ids(g / "raw") == sorted(first) and ids(g / "typed") == sorted(first + second)
    assert ids(g / "_quarantine" / "batches" / "raw") == sorted(second)
    checks = sink.watermarks()["raw"]["checks"]
    assert [(c["name"], c["passed"]) for c in checks] == [("table schema", False)]
    assert verify_table(open_storage(str(g))).errors == []


def test_group_tables_gain_columns_with_add_columns(spark, tmp_path):
    first = feed(tmp_path)
    assert run_group(spark, tmp_path)[1] is None
    second = feed(tmp_path)
    extra = lambda df: df.withColumn("extra", F.col("id") + 1000)  # noqa: E731
    _, error = run_group(spark, tmp_path, extra, policy="partial")  # without evolution: both quarantined
    assert error is None and ids(tmp_path / "g" / "_quarantine" / "batches" / "raw") == sorted(second)
    third = feed(tmp_path)
    _, error = run_group(spark, tmp_path, lambda df: extra(df).withColumn("id", F.col("id").cast("int")), schema_evolution="add_columns")
    assert error is None
    for table in ("raw", "typed"):
        path = tmp_path / "g" / table
        assert [(r.batch_id, r.reason) for r in schema_history(open_storage(str(path)))] == [(0, "create"), (1, "evolve")]
        rows = read.arrow(str(path)).to_pydict()
        assert sorted(zip(rows["id"], rows["extra"], strict=True)) == sorted([(i, None) for i in first] + [(i, i + 1000) for i in third])
        files = [f for f in path.rglob("*.parquet") if not any(part.startswith("_") for part in f.relative_to(path).parts)]
        assert {str(pq.read_schema(f).field("id").type) for f in files} == {"int64"}  # the int batch was cast to the table's long
        assert sorted(r.id for r in spark.read.option("mergeSchema", "true").parquet(str(path)).collect()) == sorted(first + third)
