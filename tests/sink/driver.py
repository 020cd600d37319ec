"""A streaming job run as a separate driver process, so tests can SIGKILL it for real.

    python -m tests.sink.driver --input DIR --table DIR --checkpoint DIR [--mode rename|direct]
        [--format parquet] [--partition-by p] [--files-per-trigger 2] [--lease-timeout 60s]
        [--continuous SECONDS] [--forks] [--private-manifest]
    python -m tests.sink.driver --kafka DIR [--topics a,b] [--starting-offsets earliest|latest|table|JSON] ...

``--forks`` writes a dataset group instead of one table: output ``raw`` (parquet, partitioned
by p) and output ``byp`` (json, one table per value of p, its own transform) - one commit.
``--private-manifest`` (with ``--format delta``): ``spark_manifest=False``, the manifest in
``_seo/manifest`` only.
``--kafka DIR`` reads the Kafka stand-in (``streaming_exactly_once.testing.fake_kafka``, topics ``--topics``) instead
of CSV files: ``id`` is the record's value, ``topic``/``partition``/``offset`` are kept for the
sink's offset guard. ``--starting-offsets`` applies to an empty checkpoint only, as Kafka's does;
``table`` means ``sink.starting_offsets()`` (where the table's records end; earliest if none).

Crash points come from the environment (SEO_CRASH_AT, SEO_FAIL_AT, SEO_PAUSE_AT): the sink's
storage_wrapper option installs streaming_exactly_once.testing.faults, in this process or, with
--connect, in the Connect server's worker that writes the table (it inherits this environment).
Exit codes: 0 all input consumed, 3 ConcurrentWriterError, 4 WriterFencedError.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from streaming_exactly_once.testing.faults import FROM_ENV as FAULTS_FROM_ENV

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--input", default=None, help="CSV input directory (or --kafka)")
    p.add_argument("--kafka", default=None, help="read the fake Kafka source under this directory instead")
    p.add_argument("--topics", default="a,b", help="with --kafka: the topics subscribed to")
    p.add_argument(
        "--starting-offsets",
        default="earliest",
        help="with --kafka, for an empty checkpoint: earliest, latest, table (sink.starting_offsets()) or JSON",
    )
    p.add_argument("--table", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--mode", default="rename")
    p.add_argument("--format", default="parquet")
    p.add_argument("--partition-by", default="p")
    p.add_argument("--files-per-trigger", type=int, default=2)
    p.add_argument("--lease-timeout", default="60s")
    p.add_argument("--connect-handover-wait", default="60s")
    p.add_argument("--continuous", type=float, default=0.0, help="run with processingTime triggers for N seconds")
    p.add_argument("--events", default=None, help="append commit events (JSON lines) here")
    p.add_argument("--until-done", default=None, help="run continuously until this marker file exists and input is drained")
    p.add_argument("--compact-interval", type=int, default=10)
    p.add_argument("--retain", type=int, default=100)
    p.add_argument("--forks", action="store_true", help="a DatasetSink with two outputs (raw, byp per dataset)")
    p.add_argument("--connect", action="store_true", help="run through a local Spark Connect server (remote('local[1]'))")
    p.add_argument("--evolve", type=int, default=None, help="add the columns c0..c<N> (literals) to the stream, with schema_evolution='add_columns'")
    p.add_argument("--private-manifest", action="store_true", help="format delta: spark_manifest=False")
    args = p.parse_args(argv)
    if (args.input is None) == (args.kafka is None):
        p.error("give one of --input and --kafka")
    if args.kafka and (args.connect or args.forks or args.evolve is not None):
        p.error("--kafka runs a classic driver writing one table (no --connect, --forks, --evolve)")
    if args.kafka:  # the data source's reader runs in Python workers (the JVM's children): they import it from here
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (repo, os.environ.get("PYTHONPATH")) if x)

    from pyspark.sql import SparkSession

    from streaming_exactly_once import DatasetSink, ExactlyOnceSink
    from streaming_exactly_once.errors import ConcurrentWriterError
    from tests.datagen import CSV_SCHEMA

    events = open(args.events, "a") if args.events else None

    def on_commit(event):
        if events:
            events.write(json.dumps(event) + "\n")
            events.flush()

    try:
        common = dict(
            lease_timeout=args.lease_timeout,
            connect_handover_wait=args.connect_handover_wait,
            watermark_columns=["id"],
            on_commit=on_commit,
            compact_interval=args.compact_interval,
            min_batches_to_retain=args.retain,
            storage_wrapper=FAULTS_FROM_ENV,
            schema_evolution="add_columns" if args.evolve is not None else "none",
        )
        if args.forks:
            sink = DatasetSink(args.table, outputs=fork_outputs(), **common)
        else:
            sink = ExactlyOnceSink(
                args.table,
                format=args.format,
                partition_by=[c for c in args.partition_by.split(",") if c],
                staging_mode=args.mode,
                writer_options={"header": "true"} if args.format == "csv" else {},
                **({"spark_manifest": False} if args.private_manifest else {}),
                **common,
            )
        if args.connect:
            # foreachBatch runs in a worker of the server, which takes the lease at its first
            # batch; the server is a child of this process and passes our environment on.
            os.environ["SPARK_TESTING"] = "1"  # pyspark then binds the server to a free port
            builder = SparkSession.builder.remote("local[1]").config("spark.connect.grpc.binding.address", "127.0.0.1")
        else:
            sink.open()  # the lease first: a second writer fails before Spark starts
            builder = SparkSession.builder.master("local[2]")
        spark = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.streaming.noDataProgressEventInterval", "100")
            .getOrCreate()
        )
        if not args.connect:
            spark.sparkContext.setLogLevel("ERROR")
        if args.kafka:
            stream = kafka_stream(spark, sink, args)
        else:
            stream = spark.readStream.schema(CSV_SCHEMA).option("maxFilesPerTrigger", args.files_per_trigger).csv(args.input)
        if args.evolve is not None:  # c0..cN: a new column at this run's first batch, a schema-changing commit
            from pyspark.sql import functions as F

            # (the earlier runs' columns stay: F.lit is non-nullable, and a table refuses a batch without
            # a non-nullable column of its own)
            stream = stream.select("*", *(F.lit(i).alias(f"c{i}") for i in range(args.evolve + 1)))
        continuous = args.continuous or args.until_done
        trigger = {"processingTime": "200 milliseconds"} if continuous else {"availableNow": True}
        query = sink.start(stream, checkpoint_location=args.checkpoint, trigger=trigger)
        epoch = "remote" if args.connect else sink.committer.epoch
        print(f"STARTED {query.id} epoch {epoch}", flush=True)
        if args.until_done:
            last_ts, idle = None, 0
            while query.isActive:
                time.sleep(0.25)
                if args.connect:
                    # Connect: a restarted query with nothing new reports no progress at all;
                    # its status says whether a trigger found data or is running
                    status = query.status
                    quiet = not status["isDataAvailable"] and not status["isTriggerActive"]
                    idle = idle + 1 if quiet and os.path.exists(args.until_done) else 0
                    if idle >= 8:
                        break
                    continue
                progress = query.lastProgress
                if progress is None or progress["timestamp"] == last_ts:
                    continue
                last_ts = progress["timestamp"]
                drained = progress["numInputRows"] == 0 and os.path.exists(args.until_done)
                idle = idle + 1 if drained else 0
                if idle >= 3:
                    break
            if query.exception() is not None:
                raise query.exception()
            sink.stop()
        elif args.continuous:
            deadline = time.time() + args.continuous
            while time.time() < deadline and query.isActive:
                time.sleep(0.2)
            if query.exception() is not None:
                raise query.exception()
            sink.stop()
        else:
            query.awaitTermination()
            sink.close()
    except ConcurrentWriterError as exc:
        print(f"CONCURRENT {exc}", flush=True)
        return 3
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if args.connect and os.environ.get("SEO_CRASH_AT") and "Python worker exited unexpectedly" in text:
            # the worker killed itself at its boundary: the rest of the "machine" goes with it
            print("WORKER-KILLED", flush=True)
            if os.getpgrp() == os.getpid():  # launched as its own group (the torture harness)
                os.killpg(0, signal.SIGKILL)
            return 9
        if "ConcurrentWriterError" in text:  # Spark Connect: raised in the worker at the first batch
            print(f"CONCURRENT {text[:300]}", flush=True)
            return 3
        if "WriterFencedError" in text or type(exc).__name__ == "WriterFencedError":
            print(f"FENCED {text[:300]}", flush=True)
            return 4
        raise
    print("DONE", flush=True)
    return 0


def kafka_stream(spark, sink, args):
    """The Kafka stand-in's records: ``id`` (the value, unique), ``p`` (partitions the table),
    and the source's ``topic``, ``partition`` and ``offset`` (the sink's offset guard reads them)."""
    from streaming_exactly_once.testing.fake_kafka import FakeKafka

    spark.dataSource.register(FakeKafka)
    starting = args.starting_offsets
    if starting == "table":  # a lost checkpoint restarted exactly where the table's records end
        starting = sink.starting_offsets() or "earliest"
    print(f"STARTING-OFFSETS {starting}", flush=True)
    return (
        spark.readStream.format("fakekafka")
        .option("path", args.kafka)
        .option("subscribe", args.topics)
        .option("startingOffsets", starting)
        .load()
        .selectExpr("CAST(CAST(value AS STRING) AS LONG) AS id", "topic", "partition", "offset")
        .selectExpr("id", "CAST(id % 4 AS STRING) AS p", "topic", "partition", "offset")
    )


def fork_outputs():
    from streaming_exactly_once import Output

    def doubled(df):
        return df.selectExpr("id", "p", "v * 2 AS v2")

    return [Output("raw", partition_by=("p",)), Output("byp", format="json", dataset_column="p", transform=doubled)]


if __name__ == "__main__":
    sys.exit(main())
