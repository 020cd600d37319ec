"""ExactlyOnceSink with real streaming queries (local[2]): every input id exactly once."""

from __future__ import annotations

import shutil
import time

import pytest

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.errors import CheckpointRewoundError, ConcurrentWriterError
from streaming_exactly_once.manifest.paths import normalize_uri
from streaming_exactly_once.testing.faults import BOUNDARIES, FEATURE_ONLY, GROUP_ONLY
from tests.datagen import PARTITION_VALUES, write_csv_files
from tests.sink.conftest import assert_exactly_once, assert_table_clean, read_ids, run_driver, run_query, stream

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("fmt", ["parquet", "json", "csv"])
@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_every_row_exactly_once(spark, tmp_path, fmt, mode):
    ids = write_csv_files(tmp_path / "in", n_files=7, rows_per_file=12)
    table = tmp_path / "out table"
    sink, error = run_query(
        spark,
        tmp_path / "in",
        table,
        tmp_path / "ckpt",
        format=fmt,
        partition_by=["p"],
        staging_mode=mode,
        writer_options={"header": "true"} if fmt == "csv" else {},
    )
    assert error is None
    assert sink.counters["committed"] == 4
    assert_exactly_once(spark, table, ids, fmt)
    assert_table_clean(table)
    # the rows each batch recorded: counted by the writer (Parquet footers in rename mode, the
    # writing tasks in direct mode) or by observing the write (other formats)
    records = [sink.committer.logs.commits.record(b) for b in range(4)]
    assert sum(r.num_rows for r in records if r is not None) == len(ids)
    assert records[-1] is not None and records[-1].table_rows == len(ids)
    reader = spark.read.format(fmt).schema("id LONG, v DOUBLE, p STRING")
    if fmt == "csv":
        reader = reader.option("header", "true")
    rows = reader.load(str(table)).collect()
    assert {r.id: r.p for r in rows} == {i: PARTITION_VALUES[i % 4] for i in ids}  # partition values survive
    assert sorted(normalize_uri(f) for f in spark.read.format(fmt).schema("id LONG").load(str(table)).inputFiles()) == sorted(
        normalize_uri(u) for u in (e.path for e in sink.committer.logs.manifest.files())
    )


@pytest.mark.parametrize("mode", ["rename", "direct"])
@pytest.mark.parametrize("boundary", [b for b in BOUNDARIES if b != "mid-move" and b not in (*GROUP_ONLY, *FEATURE_ONLY)])
def test_failure_at_every_boundary_then_restart(spark, tmp_path, monkeypatch, boundary, mode):
    if (mode, boundary) in (("direct", "after-move"), ("rename", "after-cleanup")):
        pytest.skip(f"{mode} mode has no {boundary} boundary")
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    monkeypatch.setenv("SEO_FAIL_AT", f"{boundary}@2")  # in the second batch
    _, error = run_query(spark, tmp_path / "in", table, ckpt, partition_by=["p"], staging_mode=mode)
    if boundary in ("after-records-sync", "after-wal-delete"):
        # the claim is dropped by the janitor, off the batch's path: its failure is logged, the
        # query goes on, and the batch's staging leftovers wait for the next start
        assert error is None and list((table / "_seo" / "staging").iterdir())
    else:
        assert error is not None and "injected failure" in str(error)
    monkeypatch.delenv("SEO_FAIL_AT")
    sink, error = run_query(spark, tmp_path / "in", table, ckpt, partition_by=["p"], staging_mode=mode)
    assert error is None
    assert_exactly_once(spark, table, ids)
    assert_table_clean(table)


def test_failure_mid_move_direct_and_rename(spark, tmp_path, monkeypatch):
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=8)
    monkeypatch.setenv("SEO_FAIL_AT", "mid-move@1")
    _, error = run_query(spark, tmp_path / "in", tmp_path / "t", tmp_path / "c", partition_by=["p"], staging_mode="rename")
    assert error is not None
    monkeypatch.delenv("SEO_FAIL_AT")
    run_query(spark, tmp_path / "in", tmp_path / "t", tmp_path / "c", partition_by=["p"], staging_mode="rename")
    assert_exactly_once(spark, tmp_path / "t", ids)
    assert_table_clean(tmp_path / "t")


def test_replayed_batch_is_skipped(spark, tmp_path):
    df = spark.createDataFrame([(i, "a", 0.5) for i in range(5)], "id LONG, p STRING, v DOUBLE")
    sink = ExactlyOnceSink(str(tmp_path / "t"), query_id="3b8f9d8e-0000-4000-8000-000000000001")
    sink(df, 0)
    sink(df, 0)
    sink(df, 1)
    sink.close()
    assert sink.counters["committed"] == 2 and sink.counters["duplicates"] == 1
    assert sorted(read_ids(spark, tmp_path / "t").elements()) == sorted(list(range(5)) * 2)


def test_recreated_checkpoint_neither_duplicates_nor_loses(spark, tmp_path):
    first = write_csv_files(tmp_path / "in", n_files=5, rows_per_file=6)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    run_query(spark, tmp_path / "in", table, ckpt, partition_by=["p"])
    shutil.rmtree(ckpt)  # checkpoint lost: Spark's file source will re-read every file
    second = write_csv_files(tmp_path / "in", n_files=3, rows_per_file=6, start_file=5)
    sink, error = run_query(spark, tmp_path / "in", table, ckpt, partition_by=["p"], files_per_trigger=3)
    assert error is None
    assert_exactly_once(spark, table, first + second)
    assert sink.counters["skipped_rows"] == len(first)  # every old row seen again and dropped
    assert_table_clean(table)


def test_one_sink_reads_a_checkpoint_recreated_under_it_afresh(spark, tmp_path):
    """The sink keeps what it read of a query's checkpoint while the query runs; the same sink
    object writing the query that recreated the checkpoint at the same path reads it anew: each
    batch records the new checkpoint's offsets and input files, each row lands once."""
    from streaming_exactly_once.checkpoint import SparkCheckpoint
    from streaming_exactly_once.storage import open_storage
    from streaming_exactly_once.table.identity import read_identity
    from streaming_exactly_once.table.table_logs import TableLogs

    first = write_csv_files(tmp_path / "in", n_files=3, rows_per_file=4)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    sink = ExactlyOnceSink(str(table), partition_by=["p"])
    sink.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(ckpt), trigger={"availableNow": True}).awaitTermination()
    shutil.rmtree(ckpt)
    second = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=4, start_file=3)
    query = sink.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(ckpt), trigger={"availableNow": True})
    query.awaitTermination()
    sink.close()
    assert_exactly_once(spark, table, first + second)
    assert sink.counters["skipped_rows"] == len(first)
    storage = open_storage(str(table))
    offsets_log = TableLogs.for_identity(storage, read_identity(storage)).require_offsets()
    records = [r for m in range(sink.committer.latest_batch_id + 1) for r in offsets_log.get(m) or [] if r.query_id == str(query.id)]
    spark_ckpt = SparkCheckpoint(open_storage(str(ckpt)))
    # 5 files, 2 a batch: batch 0 re-read two old files only (nothing to write), 1 and 2 hold the new rows
    assert [r.spark_batch_id for r in records] == [1, 2]
    for record in records:
        assert list(record.source_offsets) == spark_ckpt.offsets(record.spark_batch_id).offsets


def test_a_checkpoint_put_back_to_an_older_copy_is_refused_before_it_loses_rows(spark, tmp_path):
    """An older copy of the checkpoint restored at its path: Spark re-plans batch 1, which the
    table holds with one file, with that file and every file since. Skipped as a replay, the new
    file's rows would be lost; the batch is refused, nothing written, and a new checkpoint then
    writes each row once."""
    inputs, table, ckpt = tmp_path / "in", tmp_path / "t", tmp_path / "ckpt"
    first = write_csv_files(inputs, n_files=1, rows_per_file=5)
    run_query(spark, inputs, table, ckpt, files_per_trigger=1)
    shutil.copytree(ckpt, tmp_path / "older")
    second = write_csv_files(inputs, n_files=2, rows_per_file=5, start_file=1)
    run_query(spark, inputs, table, ckpt, files_per_trigger=1)  # batches 1 and 2, one file each
    shutil.rmtree(ckpt)
    shutil.copytree(tmp_path / "older", ckpt)
    third = write_csv_files(inputs, n_files=1, rows_per_file=5, start_file=3)
    _, error = run_query(spark, inputs, table, ckpt, files_per_trigger=5)
    assert isinstance(error, CheckpointRewoundError) and "in_00003.csv" in str(error), error
    assert_exactly_once(spark, table, first + second)
    sink, error = run_query(spark, inputs, table, tmp_path / "new", files_per_trigger=5)
    assert error is None
    assert_exactly_once(spark, table, first + second + third)
    assert sink.counters["skipped_rows"] == len(first + second)
    assert_table_clean(table)


def test_a_replay_of_the_batch_the_table_holds_is_still_skipped(spark, tmp_path):
    """A replay proper (Spark lost only the commit of its last batch) plans the batch with the
    files the table recorded for it: skipped, not refused."""
    inputs, table, ckpt = tmp_path / "in", tmp_path / "t", tmp_path / "ckpt"
    ids = write_csv_files(inputs, n_files=3, rows_per_file=4)
    run_query(spark, inputs, table, ckpt, files_per_trigger=1)
    for name in ("2", ".2.crc"):  # Spark re-runs batch 2 from its offsets
        (ckpt / "commits" / name).unlink(missing_ok=True)
    sink, error = run_query(spark, inputs, table, ckpt, files_per_trigger=1)
    assert error is None and sink.counters["duplicates"] == 1
    assert_exactly_once(spark, table, ids)


def test_second_writer_fails_fast_and_first_continues(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    table = tmp_path / "t"
    first = ExactlyOnceSink(str(table), partition_by=["p"])
    q1 = first.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(tmp_path / "c1"), trigger={"processingTime": "100 milliseconds"})
    try:
        second = ExactlyOnceSink(str(table), partition_by=["p"])
        with pytest.raises(ConcurrentWriterError) as err:
            second.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(tmp_path / "c2"))
        assert "being written by" in str(err.value) and "stop the other query" in str(err.value)
        more = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=5, start_file=4)
        deadline = time.time() + 60
        while time.time() < deadline and sum(read_ids(spark, table).values() if (table / "_spark_metadata").exists() else []) < len(ids + more):
            time.sleep(0.5)
        assert q1.isActive and q1.exception() is None
    finally:
        first.stop()
    assert_exactly_once(spark, table, ids + more)


def test_graceful_stop_mid_stream_then_resume(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=12, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    sink = ExactlyOnceSink(str(table), partition_by=["p"])
    sink.start(stream(spark, tmp_path / "in", 1), checkpoint_location=str(ckpt), trigger={"processingTime": "50 milliseconds"})
    while sink.counters["committed"] < 3:
        time.sleep(0.05)
    sink.stop()
    assert_table_clean(table)  # stopped between or during batches: never half a batch
    run_query(spark, tmp_path / "in", table, ckpt, partition_by=["p"])
    assert_exactly_once(spark, table, ids)


@pytest.mark.slow
# Two representative points (mid-move; the manifest entry of a compaction batch): the torture
# suite kills at every boundary of both modes.
@pytest.mark.parametrize("crash_at", ["mid-move@2", pytest.param("after-manifest@3", marks=pytest.mark.long)])
def test_kill_9_of_the_driver_then_restart(spark, tmp_path, crash_at):
    ids = write_csv_files(tmp_path / "in", n_files=8, rows_per_file=5)
    args = dict(input=tmp_path / "in", table=tmp_path / "t", checkpoint=tmp_path / "ckpt", files_per_trigger=2)
    crashed = run_driver(tmp_path, env_extra={"SEO_CRASH_AT": crash_at}, **args)
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    done = run_driver(tmp_path, **args)
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-3000:]
    assert_exactly_once(spark, tmp_path / "t", ids)
    assert_table_clean(tmp_path / "t")
    # the ledger survived the kill: every batch has one (the killed one's from the roll-forward
    # or its retry) and the audit finds each row once, its files intact
    from streaming_exactly_once.maintenance.audit import audit_table
    from streaming_exactly_once.storage import open_storage

    report = audit_table(open_storage(str(tmp_path / "t")))
    assert report.passed and report.ledger_from == 0 and not report.unaudited and not report.in_flight, report.to_json()
    assert report.audited_to == report.latest_batch_id and report.latest_batch_id is not None and report.latest_batch_id >= 3


def test_adopts_a_table_written_by_sparks_own_sink(spark, tmp_path):
    """Switching a query from Spark's file sink to ExactlyOnceSink on the same output directory."""
    first = write_csv_files(tmp_path / "in", n_files=13, rows_per_file=3)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    q = (
        stream(spark, tmp_path / "in", 1)
        .writeStream.format("parquet")
        .partitionBy("p")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start(str(table))
    )
    q.awaitTermination()
    assert "9.compact" in {p.name for p in (table / "_spark_metadata").iterdir()}
    second = write_csv_files(tmp_path / "in", n_files=20, rows_per_file=3, start_file=13)
    sink, error = run_query(spark, tmp_path / "in", table, ckpt, partition_by=["p"], files_per_trigger=1)
    assert error is None and sink.counters["committed"] == 20  # batches 13..32: past two compactions
    assert_exactly_once(spark, table, first + second)
    assert_table_clean(table)
    from streaming_exactly_once import read

    history = read.batches(str(table))
    assert history[0].query_id is None and history[-1].query_id == sink.committer.logs.commits.record(32).query_id
