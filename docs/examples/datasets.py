# One stream into several tables, one all-or-nothing commit per batch, with quality gates.
from pyspark.sql import SparkSession

from streaming_exactly_once import Check, DatasetSink, Output, read

spark = SparkSession.builder.getOrCreate()
stream = (
    spark.readStream.schema("id LONG, day STRING, amount DOUBLE")
    .option("header", True)
    .csv("/tmp/seo-example/landing")
)

sink = DatasetSink(
    "/tmp/seo-example/lake",
    outputs=[
        Output("all", partition_by=["day"]),  # every row, as is
        Output("by_day", dataset_column="day", format="json"),  # one table per day
    ],
    checks=[Check.row("amount >= 0"), Check.rows_between(1, 1_000_000)],
    policy="partial",
)
sink.start(
    stream, checkpoint_location="/tmp/seo-example/lake-checkpoint", trigger={"availableNow": True}
).awaitTermination()
sink.stop()

print(read.pandas("/tmp/seo-example/lake/all"))
print(read.pandas("/tmp/seo-example/lake/by_day/2026-01-02"))
