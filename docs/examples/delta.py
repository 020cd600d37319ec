# The same stream into a Delta table: each batch is one Delta version (needs the [delta] extra).
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from streaming_exactly_once import ExactlyOnceSink, read

spark = SparkSession.builder.getOrCreate()
stream = (
    spark.readStream.schema("id LONG, day STRING, amount DOUBLE")
    .option("header", True)
    .csv("/tmp/seo-example/landing")
)

sink = ExactlyOnceSink(
    "/tmp/seo-example/delta-events",
    format="delta",
    partition_by=["day"],
    delta_log_retention="30 days",
)
sink.start(
    stream, checkpoint_location="/tmp/seo-example/delta-checkpoint", trigger={"availableNow": True}
).awaitTermination()
sink.stop()

version = read.delta_version(
    "/tmp/seo-example/delta-events", as_of=0
)  # the Delta version holding batch 0
print(DeltaTable("/tmp/seo-example/delta-events", version=version).to_pandas())
