from streaming_exactly_once import read

for batch in read.batches("/tmp/seo-example/events"):  # every batch: rows, files, commit time
    print(batch.batch_id, batch.num_rows, batch.readable)

first = read.pandas("/tmp/seo-example/events", as_of=0)  # the table as it was after batch 0
print(len(first))
