"""A ``format="delta"`` table's schema with real Spark streams: Delta's enforcement, and a batch that
adds a column in its own Delta commit (a ``metaData`` action) - read back by delta-rs and polars."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from streaming_exactly_once import read
from streaming_exactly_once.errors import ConfigError, DeltaSchemaMismatchError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.delta.readback import batch_commits
from tests.sink.test_schema import feed, run

pytestmark = pytest.mark.spark


def test_a_delta_table_gains_a_column_in_the_commit_of_its_batch(spark, tmp_path):
    import polars as pl
    from deltalake import DeltaTable

    options = {"format": "delta", "delta_checkpoint_interval": 2}  # the evolving commit is version 1: a checkpoint
    as_int = lambda df: df.withColumn("id", F.col("id").cast("int"))  # noqa: E731
    extra = lambda df: as_int(df).withColumn("extra", F.col("id") * 10)  # noqa: E731
    first = feed(tmp_path)
    assert run(spark, tmp_path, as_int, **options) is None
    second = feed(tmp_path)
    with pytest.raises(DeltaSchemaMismatchError, match="column 'extra' \\(integer\\) is not in the table"):
        run(spark, tmp_path, extra, **options)
    with pytest.raises(DeltaSchemaMismatchError, match="Delta tables are not widened"):  # Delta's rules: no type widening
        run(spark, tmp_path, schema_evolution="add_columns", **options)
    with pytest.raises(ConfigError, match="add_and_widen"):
        run(spark, tmp_path, schema_evolution="add_and_widen", **options)
    assert run(spark, tmp_path, extra, schema_evolution="add_columns", **options) is None
    table = tmp_path / "t"
    log = [json.loads(line) for line in (table / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]
    (metadata,) = [a["metaData"] for a in log if "metaData" in a]
    assert [f["name"] for f in json.loads(metadata["schemaString"])["fields"]] == ["id", "p", "v", "extra"]
    assert [a["txn"]["version"] for a in log if "txn" in a] == [1] and sum("add" in a for a in log) == 4
    assert (table / "_delta_log" / f"{1:020d}.checkpoint.parquet").exists()
    want = sorted([(i, None) for i in first] + [(i, i * 10) for i in second])
    delta_rows = DeltaTable(str(table)).to_pyarrow_table(columns=["id", "extra"]).to_pydict()
    assert sorted(zip(delta_rows["id"], delta_rows["extra"], strict=True)) == want
    assert sorted(pl.read_delta(str(table)).select("id", "extra").rows()) == want
    assert sorted((r.id, r.extra) for r in read.spark(str(table), spark).collect()) == want
    assert "extra" not in DeltaTable(str(table), version=0).schema().to_json()  # Delta time travel: the old schema
    assert sorted(batch_commits(table)) == [0, 1] and verify_table(open_storage(str(table))).problems == []
