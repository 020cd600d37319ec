"""One notebook-like Spark Connect session, run as its own process (``python -m``).

A classic SparkSession and a Spark Connect client cannot share a Python process cleanly (the
Connect client takes over ``getActiveSession`` and ``builder.getOrCreate``), so the Connect
tests run this script against a local Connect server it starts itself (``remote("local[1]")``;
the server and the ``foreachBatch`` workers are children of this process). It does, in one
session, what a user does in a notebook, and prints one JSON line per step for the test to check:

1. an ``availableNow`` run with a ``SinkProgressListener`` registered (metrics of each batch);
2. a continuous query stopped with ``query.stop()`` mid-stream, then at once a *new* sink on the
   same table and checkpoint (the stopped query's worker held the lease);
3. Spark's ``commits/N`` of the checkpoint deleted: Spark replays a committed batch;
4. the checkpoint deleted: a new query re-reads every input file.

    python -m tests.sink.connect_session INPUT TABLE CHECKPOINT [--mode rename|direct]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["SPARK_TESTING"] = "1"  # pyspark binds the local Connect server to a free port


def say(step: str, **values) -> None:
    print(json.dumps({"step": step, **values}), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("input")
    p.add_argument("table")
    p.add_argument("checkpoint")
    p.add_argument("--mode", default="rename")
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession

    from streaming_exactly_once import ExactlyOnceSink, SinkProgressListener
    from tests.datagen import CSV_SCHEMA, write_csv_files

    spark = (
        SparkSession.builder.remote("local[1]")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    say("session", type=type(spark).__module__, pid=os.getpid())

    def sink():
        return ExactlyOnceSink(args.table, partition_by=["p"], staging_mode=args.mode, watermark_columns=["id"], lease_timeout="60s")

    def stream(files_per_trigger: int):
        return spark.readStream.schema(CSV_SCHEMA).option("maxFilesPerTrigger", files_per_trigger).csv(args.input)

    # 1. availableNow with a listener
    ids = write_csv_files(args.input, n_files=4, rows_per_file=5)
    seen: list[dict] = []
    listener = SinkProgressListener(sink(), seen.append)
    spark.streams.addListener(listener)
    first = sink()
    first.start(stream(2), checkpoint_location=args.checkpoint, trigger={"availableNow": True}).awaitTermination()
    deadline = time.time() + 30
    while time.time() < deadline and len([m for m in seen if m["status"] == "committed"]) < 2:
        time.sleep(0.2)
    # the listener stays registered (removing a Connect client's last listener while its event
    # stream winds down was seen to hang the client once in a few runs)
    say("metrics", batches=[m for m in seen if m["status"] == "committed"], ids=len(ids))

    # 2. a running query stopped by the user, and a new sink started right away
    ids += write_csv_files(args.input, n_files=6, rows_per_file=5, start_file=4)
    running = sink()
    query = running.start(stream(1), checkpoint_location=args.checkpoint, trigger={"processingTime": "200 milliseconds"})
    deadline = time.time() + 120
    while query.lastProgress is None or query.lastProgress.numInputRows == 0:
        if query.exception() is not None:
            raise query.exception()
        if not query.isActive or time.time() > deadline:
            raise RuntimeError(f"the running query ended or saw no rows in 120 s (active: {query.isActive})")
        time.sleep(0.1)
    query.stop()
    t0 = time.time()
    again = sink()
    again.start(stream(2), checkpoint_location=args.checkpoint, trigger={"availableNow": True}).awaitTermination()
    say("restarted", seconds=round(time.time() - t0, 1))

    # 3. Spark replays its last batch (its commit marker is gone)
    commits = os.path.join(args.checkpoint, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):  # Hadoop's checksum file goes with it
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    sink().start(stream(2), checkpoint_location=args.checkpoint, trigger={"availableNow": True}).awaitTermination()
    say("replayed", spark_batch=last)

    # 4. the checkpoint is lost: the new query re-reads every file
    shutil.rmtree(args.checkpoint)
    ids += write_csv_files(args.input, n_files=2, rows_per_file=5, start_file=10)
    sink().start(stream(20), checkpoint_location=args.checkpoint, trigger={"availableNow": True}).awaitTermination()
    say("recreated", ids=len(ids))
    say("expected", ids=sorted(ids))
    spark.stop()
    return 0


if __name__ == "__main__":
    # A Connect client's listener thread can outlive spark.stop() and keep the interpreter from
    # exiting: end the process here, with main's outcome, whatever its threads are doing.
    code = 1
    try:
        code = main()
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
