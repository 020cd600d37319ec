"""A query moved to this sink from another on its checkpoint: from Spark's own file sink (same
output directory), or a sink swapped in by Spark 4.x's sink evolution. The sink takes over what
the checkpoint says the query read before its first batch here, so a checkpoint lost later
brings none of it back. Real streaming queries; every input id counted in the table."""

from __future__ import annotations

import shutil

import pytest

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.cli.main import main
from streaming_exactly_once.errors import DuplicateInputError
from tests.datagen import write_csv_files
from tests.sink.conftest import assert_exactly_once, run_query, stream

pytestmark = pytest.mark.spark


def spark_file_sink(spark, inputs, table, checkpoint):
    """Spark's own file sink, one input file a batch."""
    query = stream(spark, inputs, 1).writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
    query.trigger(availableNow=True).start(str(table)).awaitTermination()


def verify(table) -> int:
    try:
        main(["verify", str(table)])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_a_query_moved_from_sparks_file_sink_whose_checkpoint_is_then_lost_writes_each_row_once(spark, tmp_path):
    inputs, table, ckpt = tmp_path / "in", tmp_path / "t", tmp_path / "ckpt"
    spark_era = write_csv_files(inputs, n_files=3, rows_per_file=4)
    spark_file_sink(spark, inputs, table, ckpt)  # batches 0..2, Spark's manifest
    moved = write_csv_files(inputs, n_files=1, rows_per_file=4, start_file=3)
    sink, error = run_query(spark, inputs, table, ckpt, files_per_trigger=1)  # the same query, now through the sink
    assert error is None and sink.counters["committed"] == 1
    shutil.rmtree(ckpt)  # the checkpoint is lost: a new query re-reads every input file
    later = write_csv_files(inputs, n_files=1, rows_per_file=4, start_file=4)
    sink, error = run_query(spark, inputs, table, ckpt, files_per_trigger=5)
    assert error is None
    assert_exactly_once(spark, table, spark_era + moved + later)
    assert sink.counters["skipped_rows"] == len(spark_era + moved)
    assert verify(table) == 0


def test_a_batch_sparks_file_sink_wrote_before_the_query_moved_is_not_written_again(spark, tmp_path):
    """Spark's sink published batch 2, and the query stopped before its checkpoint recorded it
    done: the sink's first batch is Spark's batch 2 again, which Spark's sink would skip."""
    inputs, table, ckpt = tmp_path / "in", tmp_path / "t", tmp_path / "ckpt"
    ids = write_csv_files(inputs, n_files=3, rows_per_file=4)
    spark_file_sink(spark, inputs, table, ckpt)
    for name in ("2", ".2.crc"):
        (ckpt / "commits" / name).unlink(missing_ok=True)
    more = write_csv_files(inputs, n_files=1, rows_per_file=4, start_file=3)
    sink, error = run_query(spark, inputs, table, ckpt, files_per_trigger=1)
    assert error is None and sink.counters["duplicates"] == 1 and sink.counters["committed"] == 1
    assert_exactly_once(spark, table, ids + more)


def test_a_new_checkpoint_on_a_table_sparks_file_sink_wrote_is_refused_before_anything_is_written(spark, tmp_path):
    """The input files of Spark's batches are recorded only in the lost checkpoint: a new query
    re-reading them cannot tell their rows from new ones."""
    inputs, table, ckpt = tmp_path / "in", tmp_path / "t", tmp_path / "ckpt"
    ids = write_csv_files(inputs, n_files=2, rows_per_file=4)
    spark_file_sink(spark, inputs, table, ckpt)
    shutil.rmtree(ckpt)
    _, error = run_query(spark, inputs, table, ckpt)
    assert isinstance(error, DuplicateInputError), error
    assert "older than the batches Spark's own file sink wrote" in str(error)
    assert_exactly_once(spark, table, ids)


def test_a_sink_swapped_into_a_checkpoint_by_spark_4_sink_evolution_starts_at_its_batch(spark, tmp_path):
    """Spark 4.x: named sources (offsets log v2, ``sources/<name>/``) and a named sink swapped in
    (commit log v3): the sink's first batch is the checkpoint's batch 1; what batch 0 read went
    to the other sink and is not written again after the checkpoint is lost."""
    inputs, table, ckpt = tmp_path / "in", tmp_path / "t", tmp_path / "ckpt"
    confs = {"spark.sql.streaming.queryEvolution.enableSourceEvolution": "true", "spark.sql.streaming.queryEvolution.enableSinkEvolution": "true"}

    def start(foreach, sink_name):
        reader = spark.readStream.schema("id LONG, p STRING, v DOUBLE").option("maxFilesPerTrigger", 5)
        reader._jreader = reader._jreader.name("landing")
        writer = reader.csv(str(inputs)).writeStream.foreachBatch(foreach).option("checkpointLocation", str(ckpt))
        writer._jwrite = writer._jwrite.name(sink_name)
        return writer.trigger(availableNow=True).start()

    def run_sink():
        sink = ExactlyOnceSink(str(table), checkpoint_location=str(ckpt))
        try:
            start(sink, "exactly_once").awaitTermination()
        finally:
            sink.close()
        return sink

    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        write_csv_files(inputs, n_files=2, rows_per_file=3)  # batch 0: to the old sink
        start(lambda df, batch_id: None, "old").awaitTermination()
        assert (ckpt / "commits" / "0").read_text().startswith("v3") and (ckpt / "sources" / "landing").is_dir()
        swapped = write_csv_files(inputs, n_files=1, rows_per_file=3, start_file=2)
        sink = run_sink()
        assert sink.counters["committed"] == 1 and sink.last_result.spark_batch_id == 1
        assert (ckpt / "offsets" / "1").read_text().splitlines()[2].startswith("landing:")
        shutil.rmtree(ckpt)
        later = write_csv_files(inputs, n_files=1, rows_per_file=3, start_file=3)
        run_sink()
    finally:
        for key in confs:
            spark.conf.unset(key)
    assert_exactly_once(spark, table, swapped + later)
