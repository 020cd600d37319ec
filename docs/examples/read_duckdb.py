import duckdb

from streaming_exactly_once import read

con = duckdb.connect()
relation = read.duckdb(
    "/tmp/seo-example/events", con
)  # a relation, also registered as the view seo_table
print(relation.aggregate("day, sum(amount) AS total", "day").order("day"))
print(con.execute("SELECT count(*) FROM seo_table").fetchall())
