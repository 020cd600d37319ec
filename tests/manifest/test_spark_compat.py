"""Byte compatibility of ``_spark_metadata`` with Spark 4.x, both directions, with real Spark."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.manifest.paths import decode_uri, encode_uri, hive_escape, normalize_uri, partition_dir
from streaming_exactly_once.storage import open_storage
from tests.datagen import CSV_SCHEMA, PARTITION_VALUES, write_csv_files

pytestmark = pytest.mark.spark


def spark_input_files(spark, path):
    return sorted(normalize_uri(f) for f in spark.read.parquet(path).inputFiles())


@pytest.fixture(scope="module")
def spark_sink_table(spark, tmp_path_factory):
    """A table written by Spark's own file sink: 27 batches, partitioned by awkward values."""
    base = tmp_path_factory.mktemp("spark sink")
    write_csv_files(base / "in", n_files=27, rows_per_file=4)
    out = base / "N out dir"
    query = (
        spark.readStream.schema(CSV_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .csv(str(base / "in"))
        .writeStream.format("parquet")
        .partitionBy("p")
        .option("checkpointLocation", str(base / "ckpt"))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination()
    return out


def test_reads_spark_sink_manifest_exactly(spark, spark_sink_table):
    names = sorted(os.listdir(spark_sink_table / "_spark_metadata"))
    assert "9.compact" in names and "19.compact" in names and "26" in names
    log = ManifestLog(open_storage(str(spark_sink_table)))
    ours = sorted(normalize_uri(e.path) for e in log.files())  # inputFiles() is URI-encoded too
    assert len(ours) == 27 * 4  # each one-file batch of 4 rows spans the 4 partition values
    assert ours == spark_input_files(spark, str(spark_sink_table))


def test_our_encoding_reproduces_spark_bytes(spark_sink_table):
    log = ManifestLog(open_storage(str(spark_sink_table)))
    entries = log.files()
    assert {e.path.split("/p=")[1].split("/")[0] for e in entries} == {"a%20b", "c%2525d", "é%252Fü", "plain"}
    for e in entries:
        assert encode_uri(decode_uri(e.path)) == e.path
        assert e.action == "add" and not e.is_dir and e.size > 0
    on_disk = {d.name for d in spark_sink_table.iterdir() if d.name.startswith("p=")}
    assert on_disk == {"p=" + hive_escape(v) for v in PARTITION_VALUES}


def test_spark_reads_exactly_our_manifest(spark, tmp_path):
    """Our log writes 27 batches (k=10); plain spark.read.parquet honours it and skips an orphan."""
    table = tmp_path / "our table"
    storage = open_storage(str(table))
    log = ManifestLog(storage, default_interval=10)
    expected = []
    for batch in range(27):
        value = PARTITION_VALUES[batch % len(PARTITION_VALUES)]
        rel = f"{partition_dir([('p', value)])}/part-{batch:05d}.parquet"
        (table / rel).parent.mkdir(parents=True, exist_ok=True)
        ids = list(range(batch * 10, batch * 10 + 10))
        pq.write_table(pa.table({"id": ids}), table / rel)
        info = storage.info(rel)
        log.add(batch, [ManifestEntry.for_file(storage.uri(rel), size=info.size, modification_time=info.mtime_ms)])
        expected += ids
    orphan = table / partition_dir([("p", "a b")]) / "part-orphan.parquet"
    pq.write_table(pa.table({"id": [-1, -2]}), orphan)
    names = sorted(os.listdir(table / "_spark_metadata"))
    assert "9.compact" in names and "19.compact" in names
    df = spark.read.parquet(str(table))
    assert sorted(r.id for r in df.select("id").collect()) == expected
    assert sorted(r.p for r in df.select("p").distinct().collect()) == sorted(PARTITION_VALUES)
    assert spark_input_files(spark, str(table)) == sorted(normalize_uri(e.path) for e in log.files())
    # without the manifest Spark would read the orphan: proves the manifest is what hid it
    plain = spark.read.option("basePath", str(table)).parquet(str(table / "p=a b"))
    assert -1 in {r.id for r in plain.select("id").collect()}
