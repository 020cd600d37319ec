"""CSV files dropped into a landing directory -> a partitioned Parquet table, exactly once.

The classic file-to-lake job. Every file that lands is read once by Spark's file source and
committed once by the sink, even across crashes, restarts and a lost checkpoint. With
``[source] sample_data`` set, the bundled sample files are copied into the landing directory
first (at ``arrival_interval`` with a processing-time trigger), so the job runs anywhere.

    seo run landing_to_parquet --conf local
    seo run landing_to_parquet --conf local --set trigger.mode=processingTime
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from _spark_session import build_spark, bundled, trigger_of, wait  # noqa: E402  (jobs/ is on sys.path)

from streaming_exactly_once import ExactlyOnceSink, read

SPEC = {
    "source": {
        "landing": "str",
        "sample_data": "str",
        "files_per_trigger": "int",
        "arrival_interval": "duration",
        "schema": "str",
    },
    "job": {"verify": "bool", "partition_column": "str", "time_column": "str"},
}

SCHEMA = "event_id LONG, event_time TIMESTAMP, user_id STRING, event_type STRING, amount DOUBLE"


def _arrivals(sample: Path, landing: Path, interval_s: float, stop: threading.Event) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    for path in sorted(sample.glob("*.csv")):
        target = landing / path.name
        if not target.exists():
            tmp = landing / f".{path.name}.tmp"  # hidden while copied: the file source skips it
            shutil.copyfile(path, tmp)
            tmp.rename(target)
        if interval_s and stop.wait(interval_s):
            return


def _delta_ids(table_uri: str, storage_options: dict) -> list:
    """The event ids a Delta reader (delta-rs, no Spark) sees in the table."""
    from deltalake import DeltaTable

    from streaming_exactly_once.delta.engine import object_store_options, table_uri as delta_uri
    from streaming_exactly_once.storage import open_storage

    storage = open_storage(table_uri, storage_options)
    table = DeltaTable(delta_uri(storage), storage_options=object_store_options(storage) or None)
    return table.to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()


def run(config, *, on_event, stop, say):
    from pyspark.sql import functions as F

    source, job = config["source"], config["job"]
    landing = Path(source.get("landing", ".work/quickstart/landing"))
    time_column = job.get("time_column", "event_time")
    partition_column = job.get("partition_column", "day")
    trigger = trigger_of(config["trigger"])
    feeder = None
    if source.get("sample_data"):
        interval = 0.0
        if "processingTime" in trigger and source.get("arrival_interval"):
            from streaming_exactly_once.config import parse_duration_ms

            interval = parse_duration_ms(source["arrival_interval"], key="source.arrival_interval") / 1000
        if interval:
            feeder = threading.Thread(target=_arrivals, args=(bundled(source["sample_data"]), landing, interval, stop), daemon=True)
            feeder.start()
        else:
            _arrivals(bundled(source["sample_data"]), landing, 0, stop)
    landing.mkdir(parents=True, exist_ok=True)
    sink_section = dict(config["sink"])
    sink_section.setdefault("partition_by", [partition_column])
    sink_section.setdefault("watermark_columns", [time_column])
    sink = ExactlyOnceSink.from_config(sink_section, storage_options=config["storage"], on_commit=on_event)
    sink.open()  # lease and recovery before Spark starts: a second writer fails at once
    spark = build_spark(config["spark"], "seo-landing-to-parquet")
    stream = (
        spark.readStream.schema(source.get("schema", SCHEMA))
        .option("header", "true")
        .option("maxFilesPerTrigger", source.get("files_per_trigger", 2))
        .csv(str(landing))
        .withColumn(partition_column, F.to_date(F.col(time_column)))
    )
    say(f"streaming {landing} -> {sink.storage.root_uri} ({sink.staging_mode} staging)")
    query = sink.start(stream, checkpoint_location=sink.checkpoint_location or str(landing.parent / "checkpoint"), trigger=trigger)
    wait(query, sink, stop, say)
    sink.close()
    summary = {"table": sink.storage.root_uri, "skipped replays": sink.counters["duplicates"]}
    if job.get("verify", True):
        landed = spark.read.schema(source.get("schema", SCHEMA)).option("header", "true").csv(str(landing))
        landed_ids = {r[0] for r in landed.select("event_id").collect()}
        table = read.arrow(sink.storage.root_uri, columns=["event_id"], storage_options=config["storage"])
        ids = table.column("event_id").to_pylist()
        if sink.options.format == "delta":  # Delta readers must see the very same rows
            delta_ids = _delta_ids(sink.storage.root_uri, config["storage"])
            summary["rows in Delta table"] = len(delta_ids)
            if sorted(delta_ids) != sorted(ids):
                summary["Delta table differs"] = True
        from streaming_exactly_once.maintenance.verify import verify_table

        report = verify_table(sink.storage)
        summary.update(
            {
                "rows landed": len(landed_ids),
                "rows in table": len(ids),
                "duplicates": len(ids) - len(set(ids)),
                "missing": len(landed_ids - set(ids)) if not stop.is_set() else "n/a (stopped early)",
                "table check": "OK" if report.ok and not report.problems else f"{len(report.problems)} problem(s)",
            }
        )
        summary["verified"] = (
            summary["duplicates"] == 0
            and summary["table check"] == "OK"
            and (stop.is_set() or summary["missing"] == 0)
            and not summary.get("Delta table differs")
        )
    spark.stop()
    return summary
