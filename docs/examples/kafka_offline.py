# The Kafka path without a broker: the stand-in source the tests use, shipped with the library.
import os
import shutil
import sys
from collections import Counter

from pyspark.sql import SparkSession

from streaming_exactly_once import ExactlyOnceSink, read
from streaming_exactly_once.testing.fake_kafka import FakeKafka, produce

# Spark's Python workers read the stand-in: they need this environment's Python
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
spark = SparkSession.builder.master("local[2]").getOrCreate()
spark.dataSource.register(FakeKafka)

work = "/tmp/seo-example/kafka"
shutil.rmtree(work, ignore_errors=True)


def run_once(starting="earliest"):
    stream = (
        spark.readStream.format("fakekafka")  # a cluster: .format("kafka")
        .option("path", f"{work}/broker")  # ... .option("kafka.bootstrap.servers", ...)
        .option("subscribe", "events")
        .option("startingOffsets", starting)
        .load()
        .selectExpr("CAST(value AS STRING) AS body", "topic", "partition", "offset")
    )
    sink = ExactlyOnceSink(f"{work}/events")
    query = sink.start(
        stream,
        checkpoint_location=f"{work}/checkpoint",
        trigger={"availableNow": True},
    )
    query.awaitTermination()
    sink.stop()


produce(f"{work}/broker", "events", 0, [f"a-{i}" for i in range(5)])
produce(f"{work}/broker", "events", 1, [f"b-{i}" for i in range(5)])
run_once()
produce(f"{work}/broker", "events", 0, ["a-5", "a-6"])

shutil.rmtree(f"{work}/checkpoint")  # the checkpoint is lost
run_once("earliest")  # every record is read again; what the table holds is dropped

counts = Counter(read.pandas(f"{work}/events")["body"])
print(f"{len(counts)} records, each once: {set(counts.values()) == {1}}")
