"""Spark 4.x modes a ``foreachBatch`` sink cannot serve exactly once are refused, by name, before
anything is written: asynchronous progress tracking (a batch id may be re-run over other offsets)
and real-time mode (no batches at all)."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.errors import ConfigError
from tests.datagen import write_csv_files
from tests.sink.conftest import stream

pytestmark = pytest.mark.spark


def test_a_query_tracking_its_progress_asynchronously_is_refused_at_its_first_batch(spark, tmp_path):
    """Spark refuses ``foreachBatch`` with ``asyncProgressTrackingEnabled`` unless its sink check
    is overridden; then the sink refuses it."""
    write_csv_files(tmp_path / "in", n_files=1, rows_per_file=3)
    sink = ExactlyOnceSink(str(tmp_path / "t"), checkpoint_location=str(tmp_path / "c"))
    query = (
        stream(spark, tmp_path / "in")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "c"))
        .option("asyncProgressTrackingEnabled", "true")
        .option("_asyncProgressTrackingOverrideSinkSupportCheck", "true")
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException, match="tracks its progress asynchronously"):
            query.awaitTermination(180)
    finally:
        query.stop()
        sink.close()
    assert sink.counters["committed"] == 0 and not (tmp_path / "t" / "_spark_metadata").exists()


def test_real_time_mode_is_refused_at_start(spark, tmp_path):
    sink = ExactlyOnceSink(str(tmp_path / "t"))
    with pytest.raises(ConfigError, match="real-time mode"):
        sink.start(stream(spark, tmp_path), checkpoint_location=str(tmp_path / "c"), trigger={"realTime": "5 seconds"})
    assert sink._query is None
