from pyspark.sql import SparkSession

from streaming_exactly_once import read

spark = SparkSession.builder.getOrCreate()

events = read.spark("/tmp/seo-example/events", spark)  # honours the manifest, pins partition types
events.groupBy("day").sum("amount").show()

plain = spark.read.parquet("/tmp/seo-example/events")  # vanilla Spark reads _spark_metadata too
assert plain.count() == events.count()
