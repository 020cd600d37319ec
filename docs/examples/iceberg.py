# The same stream into an Iceberg table, and into a table that is Delta and Iceberg at once:
# each batch is one Iceberg snapshot (needs the [iceberg] extra; [delta] for the second).
from deltalake import DeltaTable
from pyiceberg.table import StaticTable
from pyspark.sql import SparkSession

from streaming_exactly_once import ExactlyOnceSink, read

spark = SparkSession.builder.getOrCreate()
stream = (
    spark.readStream.schema("id LONG, day STRING, amount DOUBLE")
    .option("header", True)
    .csv("/tmp/seo-example/landing")
)

sink = ExactlyOnceSink(
    "/tmp/seo-example/iceberg-events",
    format="iceberg",
    partition_by=["day"],
    iceberg_snapshots_to_keep=100,
)
sink.start(
    stream,
    checkpoint_location="/tmp/seo-example/iceberg-checkpoint",
    trigger={"availableNow": True},
).awaitTermination()
sink.stop()

# any Iceberg reader finds the table by its path (metadata/version-hint.text), no catalog needed
table = StaticTable.from_metadata("/tmp/seo-example/iceberg-events")
snapshot = read.iceberg_snapshot(
    "/tmp/seo-example/iceberg-events", as_of=0
)  # the snapshot holding batch 0
print(table.scan(snapshot_id=snapshot).to_pandas())

both = ExactlyOnceSink(
    "/tmp/seo-example/lakehouse-events", format=["delta", "iceberg"], partition_by=["day"]
)
both.start(
    stream,
    checkpoint_location="/tmp/seo-example/lakehouse-checkpoint",
    trigger={"availableNow": True},
).awaitTermination()
both.stop()
delta_rows = DeltaTable("/tmp/seo-example/lakehouse-events").to_pyarrow_table().num_rows
iceberg_rows = (
    StaticTable.from_metadata("/tmp/seo-example/lakehouse-events").scan().to_arrow().num_rows
)
assert delta_rows == iceberg_rows == read.arrow("/tmp/seo-example/lakehouse-events").num_rows
