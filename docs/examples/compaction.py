# Many tiny batches, their small files rewritten in the stream (min_age 0 for the demo only:
# keep the default "8 days" where downstream streaming queries read the table).
from pathlib import Path

from pyspark.sql import SparkSession

from streaming_exactly_once import ExactlyOnceSink, read

spark = SparkSession.builder.getOrCreate()
landing = Path("/tmp/seo-example/landing-tiny")
landing.mkdir(parents=True, exist_ok=True)
for i in range(6):
    (landing / f"events-{i}.csv").write_text(f"id,day,amount\n{i},2026-01-01,1.0\n")

stream = (
    spark.readStream.schema("id LONG, day STRING, amount DOUBLE")
    .option("header", True)
    .option("maxFilesPerTrigger", 1)
    .csv(str(landing))
)
sink = ExactlyOnceSink(
    "/tmp/seo-example/compacted",
    partition_by=["day"],
    compact_interval=3,
    compaction={"target_size": "64MB", "min_files": 2, "min_age": 0},
)
sink.start(
    stream,
    checkpoint_location="/tmp/seo-example/compacted-checkpoint",
    trigger={"availableNow": True},
).awaitTermination()
sink.stop()

print(
    len(read.files("/tmp/seo-example/compacted")),
    "live files for",
    read.arrow("/tmp/seo-example/compacted").num_rows,
    "rows",
)
