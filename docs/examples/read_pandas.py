from streaming_exactly_once import read

df = read.pandas("/tmp/seo-example/events")  # a pandas.DataFrame of the committed rows
print(df.sort_values("id"))

some = read.pandas("/tmp/seo-example/events", columns=["id", "amount"])
print(some.amount.sum())
