"""A lost checkpoint of a Kafka-like query under Spark Connect, run as its own process (``python -m``).

Like ``tests.sink.connect_session``: a local Connect server started by this client; the sink runs in
the server's ``foreachBatch`` worker. It writes a table from the stand-in Kafka source
(``streaming_exactly_once.testing.fake_kafka``), recreates the checkpoint and reads from ``earliest`` again (the
records the table holds are dropped row by row), then once more from ``latest`` after records
arrived (refused as a gap), and prints one JSON line per step.

    python -m tests.sink.connect_kafka SOURCE TABLE WORK
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["SPARK_TESTING"] = "1"  # pyspark binds the local Connect server to a free port
# the server's Python workers instantiate the stand-in source from this repository's tests package
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p)


def say(step: str, **values) -> None:
    print(json.dumps({"step": step, **values}), flush=True)


def main(argv: list[str] | None = None) -> int:
    source, table, work = (argv or sys.argv[1:])[:3]

    from pyspark.sql import SparkSession

    from streaming_exactly_once import ExactlyOnceSink
    from streaming_exactly_once.testing.fake_kafka import FakeKafka, produce

    spark = SparkSession.builder.remote("local[1]").config("spark.sql.shuffle.partitions", "2").getOrCreate()
    spark.dataSource.register(FakeKafka)

    def fill(start: int, n: int) -> None:
        for p in range(2):
            produce(source, "t", p, [f"t-{p}-{i}" for i in range(start, start + n)])

    def run(checkpoint: str, starting: str) -> str | None:
        df = (
            spark.readStream.format("fakekafka")
            .option("path", source)
            .option("subscribe", "t")
            .option("startingOffsets", starting)
            .load()
            .selectExpr("CAST(value AS STRING) AS id", "topic", "partition", "offset")
        )
        sink = ExactlyOnceSink(table)
        query = sink.start(df, checkpoint_location=checkpoint, trigger={"availableNow": True})
        try:
            query.awaitTermination()
            return None
        except Exception as exc:  # the batch's error, as the client sees it
            return f"{type(exc).__name__}: {exc}"[:2000]

    fill(0, 10)
    say("first", error=run(f"{work}/c1", "earliest"))
    fill(10, 5)
    say("recreated-earliest", error=run(f"{work}/c2", "earliest"))
    fill(15, 5)
    run(f"{work}/c3", "latest")  # starts at 20: nothing to read yet
    fill(20, 2)
    say("recreated-latest", error=run(f"{work}/c3", "latest"))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
