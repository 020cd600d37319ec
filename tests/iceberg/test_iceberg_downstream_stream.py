"""A downstream ``spark.readStream`` of a ``format="iceberg"`` table by path (docs/iceberg.md,
"A downstream readStream"). Unpartitioned, it reads each row once through ``_spark_metadata``.
Partitioned, Spark refuses the table at ``load()`` with ``CONFLICTING_DIRECTORY_STRUCTURES``:
its streaming file source infers partitions by listing the directory before it reads
``_spark_metadata``, and Iceberg's ``metadata/`` (which path-based Iceberg readers need where it
is) sits next to the ``p=...`` directories. The second test pins that stated limit: it fails
when Spark or the table layout stops refusing, and the page must then say so."""

from __future__ import annotations

from collections import Counter

import pytest

from streaming_exactly_once import ExactlyOnceSink

pytestmark = pytest.mark.spark


def _table(spark, path, partitioned: bool) -> None:
    sink = ExactlyOnceSink(str(path), format="iceberg", partition_by=["p"] if partitioned else None, query_id="q")
    try:
        sink(spark.createDataFrame([("a", "0"), ("b", "1"), ("c", "1")], "id STRING, p STRING"), 0)
    finally:
        sink.close()


def _read_stream(spark, table, checkpoint, name: str) -> Counter:
    query = (
        spark.readStream.schema("id STRING, p STRING")
        .parquet(str(table))
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return Counter(r.id for r in spark.table(name).collect())


def test_a_downstream_readstream_of_an_unpartitioned_iceberg_table_reads_each_row_once(spark, tmp_path):
    _table(spark, tmp_path / "t", partitioned=False)
    assert _read_stream(spark, tmp_path / "t", tmp_path / "c", "iceberg_downstream_flat") == Counter("abc")


def test_spark_refuses_a_downstream_readstream_of_a_partitioned_iceberg_table_at_load(spark, tmp_path):
    from pyspark.errors import SparkRuntimeException

    _table(spark, tmp_path / "t", partitioned=True)
    assert Counter(r.id for r in spark.read.parquet(str(tmp_path / "t")).collect()) == Counter("abc")  # batch reads work
    with pytest.raises(SparkRuntimeException, match="CONFLICTING_DIRECTORY_STRUCTURES"):
        _read_stream(spark, tmp_path / "t", tmp_path / "c", "iceberg_downstream_partitioned")
