import polars as pl

from streaming_exactly_once import read

df = read.polars("/tmp/seo-example/events")  # a polars.DataFrame
print(df.sort("id"))

lazy = read.polars("/tmp/seo-example/events", lazy=True)  # a LazyFrame: filters push down
print(lazy.filter(pl.col("amount") > 1.0).select("id", "amount").collect())
