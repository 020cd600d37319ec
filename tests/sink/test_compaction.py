"""Compaction in a real stream: vanilla ``spark.read.parquet`` and a downstream streaming query that
reads the table as a file source see every row once while small files are rewritten; the
downstream query's exactly-once needs the condition the compaction page states (its
``maxFileAge`` below ``min_age``), shown by the query that breaks it."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.commit.power_cut_runs import seo
from tests.datagen import write_csv_files
from tests.sink.conftest import assert_exactly_once, stream

pytestmark = pytest.mark.spark


def _run(spark, table, inputs, ckpt, **options):
    sink = ExactlyOnceSink(str(table), partition_by=["p"], compact_interval=3, **options)
    df = stream(spark, inputs, files_per_trigger=1).selectExpr("id", "p", "v", "CAST(id AS TIMESTAMP) AS ts")
    query = sink.start(df, checkpoint_location=str(ckpt), trigger={"availableNow": True})
    query.awaitTermination()
    sink.close()
    return sink


def _live(table) -> list[str]:
    return [e.uri.rsplit("/", 1)[-1] for e in ManifestLog(open_storage(str(table))).files()]


def test_vanilla_spark_reads_every_row_once_with_compacted_files(spark, tmp_path):
    inputs, table, ckpt = tmp_path / "in", tmp_path / "t", tmp_path / "ckpt"
    ids = write_csv_files(inputs, n_files=9, rows_per_file=8)
    _run(spark, table, inputs, ckpt, compaction={"target_size": "1MB", "min_files": 3, "min_age": 0})
    assert_exactly_once(spark, table, ids)
    live = _live(table)
    compacted = [n for n in live if n.startswith("part-compacted-")]
    assert compacted, live
    # without compaction: 4 partitions x 9 batches of files; the compaction batches 2, 5 and 8 merged the ones before them
    assert len(live) < 4 * 9 // 2, live
    rows = spark.read.parquet(str(table)).select("id", "ts", "p").collect()
    assert {r.id: (r.ts.timestamp(), r.p) for r in rows} == {r.id: (float(r.id), r.p) for r in rows}  # types survive the rewrite
    assert dict(spark.read.parquet(str(table)).dtypes)["ts"] == "timestamp"
    code, out = seo("--json", "verify", str(table))
    assert code == 0 and json.loads(out)["problems"] == [], out


@pytest.mark.parametrize("max_file_age,exactly_once", [("1s", True), ("7d", False)], ids=["maxFileAge-below-min_age", "default-maxFileAge"])
def test_a_downstream_file_source_query_sees_each_row_once_when_its_max_file_age_is_below_min_age(spark, tmp_path, max_file_age, exactly_once):
    """The downstream query is caught up when the compaction lands. With ``maxFileAge`` (1s) below
    the compaction's ``min_age`` (3s) it skips the new file (its timestamp is the newest of the
    files it replaces, older than what the query has read minus ``maxFileAge``); with Spark's
    default ``maxFileAge`` (7 days) it reads the new file again - the limit the docs state."""
    inputs, table, ckpt = tmp_path / "in", tmp_path / "t", tmp_path / "ckpt"
    options = {"compaction": {"target_size": "1MB", "min_files": 3, "min_age": "3s"}}
    ids = write_csv_files(inputs, n_files=3, rows_per_file=8)
    _run(spark, table, inputs, ckpt, **options)  # batches 0-2: too young to be rewritten at batch 2
    time.sleep(4)
    ids += write_csv_files(inputs, n_files=2, rows_per_file=8, start_file=3)
    _run(spark, table, inputs, ckpt, **options)  # batches 3-4
    seen: list[int] = []

    def collect(df, _batch_id):
        seen.extend(r.id for r in df.select("id").collect())

    def downstream():
        reader = spark.readStream.schema("id LONG, p STRING, v DOUBLE, ts TIMESTAMP").option("maxFileAge", max_file_age)
        query = reader.parquet(str(table)).writeStream.foreachBatch(collect)
        query = query.option("checkpointLocation", str(tmp_path / "down")).trigger(availableNow=True).start()
        query.awaitTermination()

    downstream()  # caught up: every file of batches 0-4 read
    assert Counter(seen) == Counter(ids)
    ids += write_csv_files(inputs, n_files=1, rows_per_file=8, start_file=5)
    _run(spark, table, inputs, ckpt, **options)  # batch 5 compacts batches 0-2's files (older than 3s)
    assert any(n.startswith("part-compacted-5-") for n in _live(table)), _live(table)
    assert_exactly_once(spark, table, ids)
    downstream()
    duplicates = {i: c for i, c in Counter(seen).items() if c > 1}
    assert set(seen) == set(ids)
    assert (not duplicates) is exactly_once, f"{len(duplicates)} ids read twice"
