"""Spark's rate source -> a table partitioned by minute, for soak runs of the sink.

    seo run rate_to_partitioned --conf rate --set source.duration=10m

Every row has a unique ``value``; stop it with Ctrl-C (graceful) or let ``duration`` expire.
After a soak, ``seo verify`` and ``seo status`` show the result.
"""

from __future__ import annotations

from _spark_session import build_spark, wait  # noqa: E402  (jobs/ is on sys.path)

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.config import parse_duration_ms

SPEC = {"source": {"rows_per_second": "int", "partitions": "int", "duration": "duration"}}


def run(config, *, on_event, stop, say):
    from pyspark.sql import functions as F

    source = config["source"]
    sink_section = dict(config["sink"])
    sink_section.setdefault("partition_by", ["minute"])
    sink_section.setdefault("watermark_columns", ["timestamp", "value"])
    sink = ExactlyOnceSink.from_config(sink_section, storage_options=config["storage"], on_commit=on_event)
    sink.open()
    spark = build_spark(config["spark"], "seo-rate-to-partitioned")
    stream = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", source.get("rows_per_second", 1000))
        .option("numPartitions", source.get("partitions", 2))
        .load()
        .withColumn("minute", F.date_format("timestamp", "yyyy-MM-dd'T'HH:mm"))
    )
    trigger = {"processingTime": config["trigger"].get("interval", "2 seconds")}
    query = sink.start(stream, checkpoint_location=sink.checkpoint_location or ".work/rate/checkpoint", trigger=trigger)
    duration = parse_duration_ms(source.get("duration", "60s"), key="source.duration") / 1000
    say(f"rate source -> {sink.storage.root_uri} for {duration:.0f}s (Ctrl-C stops gracefully)")
    if not stop.wait(duration):
        stop.set()
    wait(query, sink, stop, say)
    sink.close()
    spark.stop()
    return {"table": sink.storage.root_uri}
