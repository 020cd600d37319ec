# Stream CSV files into an exactly-once Parquet table (tiny data, local Spark).
from pathlib import Path

from pyspark.sql import SparkSession

from streaming_exactly_once import ExactlyOnceSink

spark = SparkSession.builder.master("local[2]").getOrCreate()

landing = Path("/tmp/seo-example/landing")
landing.mkdir(parents=True, exist_ok=True)
(landing / "events-0.csv").write_text(
    "id,day,amount\n1,2026-01-01,9.5\n2,2026-01-01,0.25\n3,2026-01-02,12.0\n"
)

stream = (
    spark.readStream.schema("id LONG, day STRING, amount DOUBLE")
    .option("header", True)
    .csv(str(landing))
)
sink = ExactlyOnceSink("/tmp/seo-example/events", partition_by=["day"], lease_timeout="1 minute")
query = sink.start(
    stream, checkpoint_location="/tmp/seo-example/checkpoint", trigger={"availableNow": True}
)
query.awaitTermination()
sink.stop()
