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


def _wait(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.parametrize(
    "max_file_age,registered,exactly_once",
    [("1s", False, True), ("7d", False, False), ("1s", True, True)],
    ids=["maxFileAge-below-min_age", "default-maxFileAge", "registered-consumer"],
)
def test_a_downstream_file_source_query_sees_each_row_once_when_its_max_file_age_is_below_min_age(
    spark, tmp_path, max_file_age, registered, exactly_once
):
    """A downstream query reads the table as a file source and is caught up when the compaction
    lands. With ``maxFileAge`` (1s) below the compaction's ``min_age`` (4s) it skips the new
    file: its timestamp is the newest of the files it replaces, older than the newest file the
    query has read minus ``maxFileAge``. With Spark's default ``maxFileAge`` (7 days) it reads the
    new file as new data - the limit the compaction page states. Registered as a consumer, its
    checkpoint says which files it has read (Spark's own log, read by the writer): the rewrite
    still lands (``test_data_compaction`` shows the files it holds back)."""
    inputs, table = tmp_path / "in", tmp_path / "t"
    inputs.mkdir()
    policy = {"target_size": "1MB", "min_files": 3, "min_age": "4s"}
    if registered:
        policy["consumers"] = {str(tmp_path / "down"): max_file_age}
    sink = ExactlyOnceSink(str(table), partition_by=["p"], compact_interval=3, compaction=policy)
    df = stream(spark, inputs, files_per_trigger=1).selectExpr("id", "p", "v", "CAST(id AS TIMESTAMP) AS ts")
    upstream = sink.start(df, checkpoint_location=str(tmp_path / "ckpt"), trigger={"processingTime": "200 milliseconds"})
    seen: list[int] = []
    downstream = None
    try:
        ids = write_csv_files(inputs, n_files=3, rows_per_file=8)
        _wait(lambda: len(_live(table)) >= 12, "batches 0-2")  # 4 partitions each; too young to be rewritten at batch 2
        # batch 3 after a pause, batch 4 after another: batches 0-2 are min_age below batch 4's
        # file less the longest pause (a query may not have run since the first file after it)
        time.sleep(5.5)
        ids += write_csv_files(inputs, n_files=1, rows_per_file=8, start_file=3)
        _wait(lambda: len(_live(table)) >= 16, "batch 3")
        time.sleep(5.5)
        ids += write_csv_files(inputs, n_files=1, rows_per_file=8, start_file=4)
        _wait(lambda: len(_live(table)) >= 20, "batch 4")
        reader = spark.readStream.schema("id LONG, p STRING, v DOUBLE, ts TIMESTAMP").option("maxFileAge", max_file_age)
        downstream = (
            reader.parquet(str(table))
            .writeStream.foreachBatch(lambda df, _: seen.extend(r.id for r in df.select("id").collect()))
            .option("checkpointLocation", str(tmp_path / "down"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        _wait(lambda: Counter(seen) == Counter(ids), "the downstream query to catch up")
        # batch 5 rewrites batches 0-2's files; for a registered consumer, batch 8 does: the rewrite
        # of batch 5 was planned after batch 4, before the consumer had read anything
        ids += write_csv_files(inputs, n_files=4 if registered else 1, rows_per_file=8, start_file=5)
        _wait(lambda: any(n.startswith("part-compacted-") for n in _live(table)), "a compaction batch's rewrite")
        _wait(lambda: set(seen) == set(ids), "the downstream query to read batch 5")
        time.sleep(2)  # a few more triggers: a new file would have been read by now
    finally:
        if downstream is not None:
            downstream.stop()
        upstream.stop()
        sink.close()
    assert_exactly_once(spark, table, ids)
    duplicates = {i: c for i, c in Counter(seen).items() if c > 1}
    assert (not duplicates) is exactly_once, f"{len(duplicates)} ids read twice"
    if duplicates:  # exactly the rewritten rows: batches 0-2
        assert set(duplicates) == set(ids[:24]), sorted(duplicates)
    if registered:
        assert not any(n.startswith("part-compacted-5-") for n in _live(table)), "rewrote files its consumer had not read"


def test_a_dataset_groups_tables_each_compact_in_the_stream(spark, tmp_path):
    """A DatasetSink with compaction: each table's small files are rewritten at its own
    compaction batches; vanilla Spark reads each table's rows once, and ``seo verify`` on the
    group and on each table is clean."""
    from streaming_exactly_once import DatasetSink, Output

    inputs, root, ckpt = tmp_path / "in", tmp_path / "g", tmp_path / "ckpt"
    ids = write_csv_files(inputs, n_files=9, rows_per_file=8)
    outputs = [Output("raw", partition_by=("p",)), Output("events", format="delta", partition_by=("p",))]
    sink = DatasetSink(str(root), outputs=outputs, compact_interval=3, compaction={"target_size": "1MB", "min_files": 3, "min_age": 0})
    df = stream(spark, inputs, files_per_trigger=1).selectExpr("id", "p", "v")
    sink.start(df, checkpoint_location=str(ckpt), trigger={"availableNow": True}).awaitTermination()
    sink.close()
    for table in ("raw", "events"):
        assert_exactly_once(spark, root / table, ids)
        live = _live(root / table)
        assert any(n.startswith("part-compacted-") for n in live), (table, live)
        assert len(live) < 4 * 9 // 2, (table, live)
        code, out = seo("--json", "verify", str(root / table))
        assert code == 0 and json.loads(out)["problems"] == [], out
    from tests.delta.readback import delta_ids

    assert delta_ids(root / "events") == Counter(ids)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_seo_compact_of_a_stopped_dataset_group_and_its_stream_carries_on(spark, tmp_path):
    """A DatasetSink without compaction leaves small files; ``seo compact`` on the stopped
    group rewrites each table's; the stream restarts from its checkpoint and goes on: vanilla
    Spark, Delta and the group's state see every row once, and its watermarks are kept."""
    from streaming_exactly_once import DatasetSink, Output
    from tests.delta.readback import delta_ids

    inputs, root, ckpt = tmp_path / "in", tmp_path / "g", tmp_path / "ckpt"
    outputs = [Output("raw", partition_by=("p",)), Output("events", format="delta", partition_by=("p",))]

    def run() -> DatasetSink:
        sink = DatasetSink(str(root), outputs=outputs, compact_interval=4, watermark_columns=["id"])
        df = stream(spark, inputs, files_per_trigger=1).selectExpr("id", "p", "v")
        sink.start(df, checkpoint_location=str(ckpt), trigger={"availableNow": True}).awaitTermination()
        sink.close()
        return sink

    ids = write_csv_files(inputs, n_files=5, rows_per_file=8)
    marks = run().watermarks()
    code, out = seo("--json", "compact", "--min-age", "0s", "--min-files", "3", "--target-size", "1MB", str(root))
    assert code == 0, out
    done = json.loads(out)
    assert done["tableBatches"] == {"events": [5, 6, 7], "raw": [5, 6, 7]} and done["batches"] == [5, 6, 7], done
    for table in ("raw", "events"):
        assert [n.startswith("part-compacted-7-") for n in _live(root / table)].count(True) >= 1, _live(root / table)
        assert_exactly_once(spark, root / table, ids)
        kept = {k: v for k, v in marks[table].items() if k != "batchId"}
        now = DatasetSink(str(root), outputs=outputs).watermarks()[table]
        assert {k: v for k, v in now.items() if k != "batchId"} == kept, table
    ids += write_csv_files(inputs, n_files=2, rows_per_file=8, start_file=5)
    run()
    for table in ("raw", "events"):
        assert_exactly_once(spark, root / table, ids)
    assert delta_ids(root / "events") == Counter(ids)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_files_with_a_timestamp_and_a_timestamp_ntz_column_are_compacted_and_read_the_same(spark, tmp_path):
    """Spark's defaults write TIMESTAMP as INT96 and TIMESTAMP_NTZ as INT64, which one Arrow
    writer cannot keep side by side: the new file stores the TIMESTAMP column as INT64
    microseconds adjusted to UTC, the same instant. Vanilla Spark and ``read.arrow`` read the same
    values and types before and after the rewrite (9999-12-31 included), and the next compaction
    merges the new file with the next files."""
    from streaming_exactly_once import read

    table = tmp_path / "t"
    sink = ExactlyOnceSink(
        str(table),
        partition_by=["p"],
        compact_interval=3,
        query_id="0e0e0e0e-0000-0000-0000-000000000001",
        compaction={"target_size": "1MB", "min_files": 3, "min_age": 0},
    )
    sql = (
        "SELECT id, 'a' AS p, IF(id % 2 = 0, TIMESTAMP'9999-12-31 23:59:59.999999', TIMESTAMP'2024-03-01 12:00:00.123456') AS ts, "
        "TIMESTAMP_NTZ'2024-03-01 12:00:00.654321' AS ntz FROM range({lo}, {hi})"
    )
    expected = {}
    for b in range(9):
        df = spark.sql(sql.format(lo=b * 4, hi=b * 4 + 4)).coalesce(1)
        expected.update({r.id: (r.ts, r.ntz) for r in df.collect()})
        if b in (5, 8):
            time.sleep(1.5)  # the rewrite planned after the batch before, written
        sink(df, b)
    sink.close()
    # batch 8 merged batch 5's new file with batches 5-7's: one new file, not one per compaction
    assert [n[:18] for n in _live(table) if n.startswith("part-compacted-")] == ["part-compacted-8-0"], _live(table)
    frame = spark.read.parquet(str(table))
    assert dict(frame.dtypes)["ts"] == "timestamp" and dict(frame.dtypes)["ntz"] == "timestamp_ntz"
    assert {r.id: (r.ts, r.ntz) for r in frame.collect()} == expected and frame.count() == len(expected)
    arrow = {r["id"]: (r["ts"], r["ntz"]) for r in read.arrow(str(table)).to_pylist()}
    assert sorted(arrow) == sorted(expected)
    assert all(arrow[i][1] == expected[i][1] and arrow[i][0].replace(tzinfo=None) == expected[i][0] for i in expected), arrow[0]
    code, out = seo("--json", "verify", str(table))
    assert code == 0 and json.loads(out)["problems"] == [], out
