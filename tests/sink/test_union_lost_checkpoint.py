"""A file source in a union with a source whose rows have no input file (rate), its checkpoint lost:
the restart drops the re-read file rows and writes the other source's rows, each row once. After
an aggregation the file rows lose their names too, and the restart is still refused."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from streaming_exactly_once import ExactlyOnceSink
from tests.datagen import write_csv_files
from tests.sink.conftest import stream

pytestmark = pytest.mark.spark


def _union(spark, input_dir, generation: int):
    files = stream(spark, input_dir, 2).selectExpr("CAST(id AS STRING) AS id", "p")
    rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 2).load()
    return files.unionByName(rate.selectExpr(f"concat('r{generation}-', CAST(value AS STRING)) AS id", "CAST(value % 3 AS STRING) AS p"))


def _run(spark, df, table, checkpoint, batches: int = 3) -> None:
    """Run the endless (rate) query until it ran ``batches`` batches that read no file, then stop."""
    import time

    sink = ExactlyOnceSink(str(table), partition_by=["p"])
    query = sink.start(df, checkpoint_location=str(checkpoint), trigger={"processingTime": "100 milliseconds"})
    try:
        deadline, idle = time.time() + 180, 0
        last = None
        while time.time() < deadline and query.isActive and idle < batches:
            progress = query.lastProgress
            if progress is not None and progress["batchId"] != last:
                last = progress["batchId"]
                files = sum(s.get("numInputRows", 0) for s in progress["sources"] if "Rate" not in s["description"])
                idle = idle + 1 if files == 0 else 0
            time.sleep(0.1)
        if query.exception() is not None:
            raise query.exception()
    finally:
        sink.stop()


def _ids(spark, table) -> Counter:
    return Counter(r.id for r in spark.read.parquet(str(table)).select("id").collect())


def test_a_union_with_rate_restarted_on_a_new_checkpoint_writes_every_row_once(spark, tmp_path):
    old = [str(i) for i in write_csv_files(tmp_path / "in", n_files=3, rows_per_file=4)]
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    _run(spark, _union(spark, tmp_path / "in", 0), table, ckpt)
    shutil.rmtree(ckpt)  # lost: the new query's file source reads every file again
    new = [str(i) for i in write_csv_files(tmp_path / "in", n_files=2, rows_per_file=4, start_file=3)]
    _run(spark, _union(spark, tmp_path / "in", 1), table, ckpt)
    ids = _ids(spark, table)
    assert {i: n for i, n in ids.items() if n > 1} == {}
    assert set(old + new) <= set(ids)
    assert any(i.startswith("r1-") for i in ids)  # the new query's rate rows were written


def test_file_rows_that_lost_their_names_in_a_shuffle_are_still_refused(spark, tmp_path):
    """A repartition (like an aggregation or a join) runs the rows in other tasks than the ones
    that read them: input_file_name() is empty for the file rows too, so they cannot be told from
    re-reads, and the restart is refused with nothing written."""
    write_csv_files(tmp_path / "in", n_files=3, rows_per_file=4)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"

    def run() -> None:
        sink = ExactlyOnceSink(str(table))
        query = sink.start(stream(spark, tmp_path / "in", 2).repartition(2), checkpoint_location=str(ckpt), trigger={"availableNow": True})
        try:
            query.awaitTermination()
        finally:
            sink.close()

    run()
    before = _ids(spark, table)
    shutil.rmtree(ckpt)
    with pytest.raises(Exception, match="cannot be traced to an input file"):  # DuplicateInputError, as Spark passes it on
        run()
    assert _ids(spark, table) == before
