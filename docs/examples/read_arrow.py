import pyarrow.compute as pc
import pyarrow.dataset as ds

from streaming_exactly_once import read

table = read.arrow("/tmp/seo-example/events")  # a pyarrow.Table
print(table.num_rows, table.schema)

large = read.arrow("/tmp/seo-example/events", columns=["id"], filter=ds.field("amount") > 1.0)
print(pc.sort_indices(large, sort_keys=[("id", "ascending")]))
