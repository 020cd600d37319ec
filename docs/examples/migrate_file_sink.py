# A query moved from Spark's file sink to ExactlyOnceSink: same table, same checkpoint.
import shutil
from pathlib import Path

from pyspark.sql import SparkSession

from streaming_exactly_once import ExactlyOnceSink

spark = SparkSession.builder.master("local[2]").getOrCreate()
work = Path("/tmp/seo-example/migrate")
shutil.rmtree(work, ignore_errors=True)
landing = work / "landing"
landing.mkdir(parents=True)
table, checkpoint = str(work / "events"), str(work / "checkpoint")


def arrive(n):  # input file n: ids 3n, 3n+1, 3n+2
    rows = "".join(f"{i},2026-01-0{1 + i % 2},{i}.5\n" for i in range(3 * n, 3 * n + 3))
    (landing / f"events-{n}.csv").write_text("id,day,amount\n" + rows)


def events():
    return (
        spark.readStream.schema("id LONG, day STRING, amount DOUBLE")
        .option("header", True)
        .option("maxFilesPerTrigger", 1)
        .csv(str(landing))
    )


# Before: Spark's own file sink
arrive(0)
arrive(1)
before = (
    events()
    .writeStream.format("parquet")
    .partitionBy("day")
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start(table)
)
before.awaitTermination()  # stopped cleanly: availableNow ran out, or before.stop()

# After: the same query through the sink - same table, same checkpoint, same partitioning
arrive(2)
sink = ExactlyOnceSink(table, partition_by=["day"])
query = sink.start(events(), checkpoint_location=checkpoint, trigger={"availableNow": True})
query.awaitTermination()
sink.stop()

# Months later the checkpoint is lost: the restarted query reads every input file again
shutil.rmtree(checkpoint)
arrive(3)
sink = ExactlyOnceSink(table, partition_by=["day"])
query = sink.start(events(), checkpoint_location=checkpoint, trigger={"availableNow": True})
query.awaitTermination()
sink.stop()

ids = [row.id for row in spark.read.parquet(table).collect()]  # vanilla Spark
print(f"{len(ids)} rows, each of ids 0-11 once: {sorted(ids) == list(range(12))}")
