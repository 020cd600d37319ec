"""Landing CSV files -> a dataset group: every event in ``all/`` and one table per event type in
``by_type/<type>/``, with quality gates, in one commit per batch.

The multi-dataset job (``streaming_exactly_once.DatasetSink``): a fork (two outputs from one
batch, each its own format and shape), a split by a dataset column, row checks whose failing
rows go to ``_quarantine/rows/...``, a minimum batch size per table, and a commit policy.

    seo run landing_to_datasets --conf datasets
    seo status .work/datasets/lake           # tables, watermarks, failed checks
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from _spark_session import build_spark, bundled, trigger_of, wait  # noqa: E402
from landing_to_parquet import SCHEMA, _arrivals  # noqa: E402  (jobs/ is on sys.path)

from streaming_exactly_once import Check, DatasetSink, Output, read

SPEC = {
    "source": {"landing": "str", "sample_data": "str", "files_per_trigger": "int", "schema": "str"},
    "datasets": {
        "dataset_column": "str",
        "policy": "str",
        "row_checks": "list",
        "min_rows": "int",
        "max_null_fraction": "float",
        "by_type_format": "str",
    },
    "job": {"verify": "bool"},
}


def outputs(settings) -> list[Output]:
    def by_type(df):
        return df.drop("day")

    return [
        Output("all", partition_by=("day",), checks=()),  # the raw fork keeps every event
        Output(
            "by_type",
            dataset_column=settings.get("dataset_column", "event_type"),
            transform=by_type,
            format=settings.get("by_type_format", "parquet"),
        ),
    ]


def checks(settings) -> list[Check]:
    """The gates of the ``by_type`` tables (the ``all`` output sets its own: none)."""
    out = [Check.row(expr) for expr in settings.get("row_checks", [])]
    if settings.get("min_rows"):
        out.append(Check.rows_between(int(settings["min_rows"]), None))
    if settings.get("max_null_fraction") is not None:
        out.append(Check.null_fraction("user_id", at_most=float(settings["max_null_fraction"]), mandatory=False))
    return out


def run(config, *, on_event, stop, say):
    from pyspark.sql import functions as F

    source, settings = config["source"], config["datasets"]
    landing = Path(source.get("landing", ".work/datasets/landing"))
    if source.get("sample_data"):
        _arrivals(bundled(source["sample_data"]), landing, 0, stop)
    landing.mkdir(parents=True, exist_ok=True)
    section = dict(config["sink"])
    section.setdefault("watermark_columns", ["event_time"])
    section.update(outputs=outputs(settings), checks=checks(settings), policy=settings.get("policy", "partial"))
    sink = DatasetSink.from_config(section, storage_options=config["storage"], on_commit=on_event)
    sink.open()
    spark = build_spark(config["spark"], "seo-landing-to-datasets")
    stream = (
        spark.readStream.schema(source.get("schema", SCHEMA))
        .option("header", "true")
        .option("maxFilesPerTrigger", source.get("files_per_trigger", 2))
        .csv(str(landing))
        .withColumn("day", F.to_date(F.col("event_time")))
    )
    say(f"streaming {landing} -> dataset group {sink.storage.root_uri}")
    checkpoint = sink.checkpoint_location or str(landing.parent / "checkpoint")
    query = sink.start(stream, checkpoint_location=checkpoint, trigger=trigger_of(config["trigger"]))
    wait(query, sink, stop, say)
    summary = {"group": sink.storage.root_uri, "tables": len(sink.tables()), "quarantined rows": sink.counters["quarantined_rows"]}
    if config["job"].get("verify", True):
        landed = spark.read.schema(source.get("schema", SCHEMA)).option("header", "true").csv(str(landing))
        landed_ids = {r[0] for r in landed.select("event_id").collect()}
        root = sink.storage.root_uri
        everything = Counter(read.arrow(f"{root}/all", columns=["event_id"], storage_options=config["storage"]).column("event_id").to_pylist())
        split: Counter = Counter()
        for table in sink.tables():
            if table.startswith("by_type/") or table.startswith("_quarantine/rows/by_type/"):
                split.update(read.arrow(f"{root}/{table}", columns=["event_id"], storage_options=config["storage"]).column("event_id").to_pylist())
        from streaming_exactly_once.maintenance.verify import verify_table

        report = verify_table(sink.storage)
        summary.update(
            {
                "rows landed": len(landed_ids),
                "rows in all/": sum(everything.values()),
                "rows in by_type/ + quarantine": sum(split.values()),
                "duplicates": sum(c - 1 for c in everything.values() if c > 1) + sum(c - 1 for c in split.values() if c > 1),
                "missing": len(landed_ids - set(everything)) + len(landed_ids - set(split)) if not stop.is_set() else "n/a (stopped early)",
                "group check": "OK" if report.ok else f"{len(report.errors)} error(s)",
            }
        )
        summary["verified"] = summary["duplicates"] == 0 and report.ok and (stop.is_set() or summary["missing"] == 0)
    sink.close()
    spark.stop()
    return summary
