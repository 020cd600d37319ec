"""Commit Delta batches without Spark: Parquet files staged by hand, as the sink would stage them."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
from streaming_exactly_once.delta.target import DeltaSettings
from streaming_exactly_once.testing.faults import with_faults
from tests.commit.helpers import stage_file

#: Spark schema JSON of the batches below (``id`` long, partition column ``p`` string).
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


def delta_committer(storage, *, fail_at=None, checkpoint_interval: int = 10, spark_manifest: bool = True, **opts) -> TableCommitter:
    options = CommitterOptions(
        heartbeat=False,
        partition_by=("p",),
        delta=DeltaSettings(checkpoint_interval=checkpoint_interval),
        spark_manifest=spark_manifest,
        **opts,
    )
    return TableCommitter(with_faults(storage, fail_at=fail_at) if fail_at else storage, options)


def parquet(ids: list[int]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
    return buf.getvalue()


def commit_batch(
    committer: TableCommitter,
    query: str,
    spark_batch: int,
    ids: list[int],
    *,
    mode="rename",
    partition="p=a",
    schema: str = SCHEMA,
    spark_staging: bool = False,
    read_as_sink: bool = False,
):
    """One batch of ``ids`` in two files, the way the sink stages them; None if already committed.
    ``read_as_sink``: rename mode's files are read (and synced) as the sink's rename writer
    reads them for their rows before the commit (``sink.rename_writer.read_staged``)."""
    committer.ensure_open()
    if committer.is_committed(query, spark_batch):
        return None
    committer.adopt_existing(lambda: schema)  # as the sink does before it stages a first batch
    try:
        with committer.batch(query, spark_batch, mode=mode) as attempt:  # aborted if the block raises
            files = []
            for part, chunk in enumerate((ids[: len(ids) // 2], ids[len(ids) // 2 :])):
                name = f"part-{part:05d}-{attempt.attempt}.c000.snappy.parquet"
                files.append(stage_file(committer.storage, attempt, f"{partition}/{name}", parquet(chunk), spark_staging=spark_staging))
            if read_as_sink and mode == "rename":
                from streaming_exactly_once.sink.rename_writer import read_staged

                files = read_staged(committer.storage, files)
            inputs = [InputFile(source=0, path=f"file:///in/{query[:4]}-{spark_batch}.csv", timestamp=1)]
            return committer.commit(attempt, files, input_files=inputs, num_rows=len(ids), schema=schema)
    except BaseException:
        committer.invalidate()
        raise
