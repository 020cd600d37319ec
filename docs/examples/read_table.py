import duckdb

from streaming_exactly_once import read

scan = read.table(
    "/tmp/seo-example/events"
)  # as_of=N for an earlier batch, storage_options=... for S3
print(scan.to_arrow().num_rows)  # pyarrow.Table
print(scan.to_pandas().head())  # pandas.DataFrame
print(scan.to_polars(lazy=True).collect().height)  # polars.LazyFrame
print(scan.to_duckdb(duckdb.connect()).limit(3).fetchall())  # DuckDB relation
print(len(scan.files()), "committed files")
