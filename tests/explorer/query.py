"""One run of a program's query, described as data (``RunSpec``) and built from it.

The same spec builds the query in the explorer's own process (on the session's SparkSession) and
in a driver process the explorer kills (``tests.explorer.driver``), so both run the same query.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.explorer.world import FILTER_SQL

FILE_SCHEMA = "id STRING, p STRING, v INT"
OFFSET_COLUMNS = ("topic", "partition", "offset")


@dataclass(frozen=True)
class RunSpec:
    table: str
    checkpoint: str
    sources: tuple[str, ...]
    input: str
    kafka: str
    #: ``startingOffsets`` of the Kafka-like source for an empty checkpoint (already resolved:
    #: ``earliest``, ``latest`` or JSON)
    starting: str = "earliest"
    fail_on_data_loss: bool = False
    rate_gen: int = 0
    rate_rows: int = 4
    filter: bool = False
    #: the query projects the Kafka columns away (``topic``, ``partition``, ``offset``)
    drop_offsets: bool = False
    #: columns ``c1``..``cN`` added to the query (schema additions)
    extra_columns: int = 0
    #: ``v`` cast to ``long`` (a widening)
    widen: bool = False
    max_files: int = 2
    #: the sink's options (JSON values)
    sink: dict[str, Any] = field(default_factory=dict)
    #: rate: stop after this many batches of the query (it has no end of its own)
    rate_batches: int = 3
    #: ``start`` (``sink.start``) or ``foreachBatch`` (Spark's ``writeStream.foreachBatch(sink)``)
    attach: str = "start"
    #: a dataset group: ``{"partitioned": .., "policy": .., "gate": ..}`` (``tests.explorer.tables``)
    group: dict[str, Any] | None = None
    #: run through a local Spark Connect server (``tests.explorer.driver``): the sink runs in
    #: the server's ``foreachBatch`` worker
    connect: bool = False

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def loads(text: str) -> RunSpec:
        data = json.loads(text)
        data["sources"] = tuple(data["sources"])
        return RunSpec(**data)

    @property
    def endless(self) -> bool:
        """A rate source never runs out: such a query runs with processing-time triggers and is
        stopped (``stop_when_drained``)."""
        return "rate" in self.sources


def build_stream(spark: Any, spec: RunSpec) -> Any:
    """The program's streaming DataFrame: its sources unioned by name, then its filter and
    projection."""
    from pyspark.sql import functions as F

    parts = []
    for source in spec.sources:
        if source == "files":
            parts.append(spark.readStream.schema(FILE_SCHEMA).option("maxFilesPerTrigger", spec.max_files).json(spec.input))
        elif source == "kafka":
            parts.append(_kafka(spark, spec))
        elif source == "rate":
            raw = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", spec.rate_rows).load()
            parts.append(
                raw.selectExpr(
                    f"concat('r{spec.rate_gen}-', CAST(value AS STRING)) AS id",
                    "CAST(value % 3 AS STRING) AS p",
                    "CAST(value % 1000 AS INT) AS v",
                )
            )
    df = parts[0]
    for other in parts[1:]:
        df = df.unionByName(other, allowMissingColumns=True)
    if spec.filter:
        df = df.where(FILTER_SQL)
    if spec.drop_offsets:
        df = df.drop(*OFFSET_COLUMNS)
    for i in range(spec.extra_columns):
        df = df.withColumn(f"c{i + 1}", F.col("v") + (i + 1))
    if spec.widen:
        df = df.withColumn("v", F.col("v").cast("long"))
    return df


def _kafka(spark: Any, spec: RunSpec) -> Any:
    """The Kafka stand-in's stream, projected. ``load()`` of a Python data source starts a Python
    worker to build the source (1-2 s on this machine), so the frame is kept for the next run with
    the same options: a streaming DataFrame may start any number of queries, each with sources of
    its own (its checkpoint's), as a user restarting a query in the same driver does."""
    from streaming_exactly_once.testing.fake_kafka import FakeKafka

    if not getattr(spark, "_seo_fake_kafka", False):  # once per session (half a second each)
        spark.dataSource.register(FakeKafka)
        spark._seo_fake_kafka = True
    key = (spec.kafka, spec.starting, spec.fail_on_data_loss)
    frames: dict[tuple[str, str, bool], Any] = getattr(spark, "_seo_kafka_frames", {})
    if any(k[0] != spec.kafka for k in frames):  # another program's: its directory is gone
        frames = {}
    if key not in frames:
        frames[key] = _load_kafka(spark, spec)
    spark._seo_kafka_frames = frames
    return frames[key]


def _load_kafka(spark: Any, spec: RunSpec) -> Any:
    raw = (
        spark.readStream.format("fakekafka")
        .option("path", spec.kafka)
        .option("subscribe", "a,b")
        .option("startingOffsets", spec.starting)
        .option("failOnDataLoss", str(spec.fail_on_data_loss).lower())
        .load()
    )
    return raw.selectExpr("split(CAST(value AS STRING), ':') AS f", "topic", "partition", "offset").selectExpr(
        "f[0] AS id", "f[1] AS p", "CAST(f[2] AS INT) AS v", "topic", "partition", "offset"
    )


def build_sink(spec: RunSpec) -> Any:
    from streaming_exactly_once import DatasetSink, ExactlyOnceSink
    from streaming_exactly_once.testing.faults import FROM_ENV

    extra = {"checkpoint_location": spec.checkpoint} if spec.attach == "foreachBatch" else {}
    if spec.group is not None:
        from tests.explorer.tables import group_options

        options = {k: v for k, v in spec.sink.items() if k not in ("partition_by", "staging_mode", "spark_manifest")}
        return DatasetSink(
            spec.table, **{"storage_wrapper": FROM_ENV, **options, **extra, **group_options(spec.group, spec.group.get("gate", False))}
        )
    return ExactlyOnceSink(spec.table, **{"storage_wrapper": FROM_ENV, **spec.sink, **extra})


def start_query(spark: Any, sink: Any, spec: RunSpec) -> Any:
    """The query started the way the program attaches the sink."""
    stream = build_stream(spark, spec)
    if spec.attach == "start":
        return sink.start(stream, checkpoint_location=spec.checkpoint, trigger=trigger(spec))
    writer = stream.writeStream.foreachBatch(sink).option("checkpointLocation", spec.checkpoint)
    return writer.trigger(**trigger(spec)).start()


def trigger(spec: RunSpec) -> dict[str, Any]:
    return {"processingTime": "100 milliseconds"} if spec.endless else {"availableNow": True}


def stop(sink: Any, query: Any, spec: RunSpec) -> None:
    """Stop an endless query: ``sink.stop()`` for a query the sink started (it waits for an
    in-flight commit), else ``query.stop()`` and ``sink.close()`` (which waits for one too)."""
    if spec.attach == "start":
        sink.stop()
    else:
        query.stop()
        sink.close()


def stop_when_drained(query: Any, spec: RunSpec, timeout_s: float) -> bool:
    """An endless (rate) query: wait until it ran ``rate_batches`` batches and its last batch
    read nothing from its other sources, then stop it. True if it got there in time."""
    import time

    deadline = time.time() + timeout_s
    first = None
    while time.time() < deadline and query.isActive:
        progress = query.lastProgress
        if progress is not None:
            batch = progress["batchId"]
            first = batch if first is None else first
            others = sum(s.get("numInputRows", 0) for s in progress.get("sources", []) if "Rate" not in s.get("description", ""))
            if batch - first >= spec.rate_batches and others == 0:
                return True
        time.sleep(0.2)
    return False
