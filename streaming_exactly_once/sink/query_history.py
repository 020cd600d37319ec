"""What the table holds of the query whose batch arrives: is it a query the table knows (a batch
it committed is a replay, skipped), a new one, or one moved here from another sink on its
checkpoint - Spark's own file sink, or a sink swapped in by Spark 4.x's sink evolution?

A query the table does not know and whose batch is not its checkpoint's first was reading before
it reached this table: what its file sources admitted in its earlier batches counts as read
(``take_over``), so a checkpoint lost later does not bring those rows back. Those batches went to
the other sink; the table takes over the query's view of its input, as the checkpoint had it.

A table Spark's file sink wrote (``Writer.spark_sink_batches``) is special until a query commits
through us: a batch Spark's sink published before the query moved is skipped, as Spark's sink
would skip it; and a new checkpoint's first batch that re-reads input files older than Spark's
last batch is refused, since nothing but the lost checkpoint recorded which files those were.
"""

from __future__ import annotations

import logging

from ..checkpoint.reader import InputFile, SparkCheckpoint
from ..commit.writer import Writer
from ..errors import DuplicateInputError

log = logging.getLogger("streaming_exactly_once.sink")


def knows_query(writer: Writer, query_id: str, spark_id: str | None, checkpoint: str | None) -> bool:
    """Whether the table has committed batches of this query *and this checkpoint*: with
    ``query_id=`` given, a recreated checkpoint keeps the id but not its own (``spark_id``, read
    from its ``metadata``), and its batches are a new query's, not replays of the old one's."""
    if not writer.knows_query(query_id):
        return False
    if spark_id is None:
        return True
    record = writer.query_offsets(query_id)
    if record is None:
        return True  # nothing to compare with (a rebuilt record): as before
    if record.spark_query_id is None and record.query_id != spark_id:
        return record.checkpoint in (None, checkpoint)  # written before the checkpoint's id was kept
    return record.checkpoint_query_id == spark_id


def committed_under_another_id(writer: Writer, query_id: str, spark_id: str | None, batch_id: int) -> str | None:
    """The query id under which the table committed this checkpoint's batch ``batch_id``, if not
    ``query_id``: the run changed, added or dropped ``query_id=`` on the same checkpoint (its own
    id, from its ``metadata``: ``spark_id``, or ``query_id`` itself without ``query_id=``), and
    Spark replays the batch it had not marked done under the new id. A replay is a replay
    whatever the id is called now: a source whose rows carry no offsets or files has nothing
    else to tell it by."""
    own = spark_id or query_id
    for record in writer.query_records():
        if record.query_id != query_id and record.checkpoint_query_id == own and writer.is_committed(record.query_id, batch_id):
            return record.query_id
    return None


def written_by_spark_sink(writer: Writer, query_id: str, batch_id: int, inputs: list[InputFile]) -> bool:
    """Whether Spark's own file sink wrote batch ``batch_id`` of this table before the query moved
    here (then it is skipped); refuses a new checkpoint's batch 0 on such a table that re-reads
    input files older than Spark's batches (module docstring)."""
    spark_batches = writer.spark_sink_batches()
    if spark_batches == 0:
        return False
    root = writer.storage.root_uri
    if 0 < batch_id < spark_batches:
        log.warning("skipping batch %d of query %s: Spark's file sink wrote it to %s before the query moved to this sink", batch_id, query_id, root)
        return True
    if batch_id > 0 or not inputs:
        return False
    newest = max((e.modification_time for e in writer.logs.require_manifest().files()), default=0)
    older = sorted(f.path for f in inputs if f.timestamp <= newest)
    if older:
        raise DuplicateInputError(
            f"Batch 0 of query {query_id} reads {len(older)} input file(s) ({', '.join(older[:3])}{', ...' if len(older) > 3 else ''}) "
            f"older than the batches Spark's own file sink wrote to {root}, whose input files are recorded only in that "
            "query's checkpoint: their rows may be in the table already. Nothing was written. Run this sink on the "
            "checkpoint that wrote the table (it then takes over that record), or move the input files whose rows the "
            "table holds out of the input directory.",
            batch_id=batch_id,
            table=root,
        )
    return False


def take_over(writer: Writer, query_id: str, batch_id: int, checkpoint: SparkCheckpoint | None) -> list[InputFile]:
    """The input files the query read before the table's first batch of it (module docstring)."""
    if batch_id == 0 or checkpoint is None:
        return []
    root = writer.storage.root_uri
    files = checkpoint.files_read_before(batch_id)
    if files is None:
        log.warning(
            "query %s reaches table %s at its batch %d, and the input files of its earlier batches are not in its "
            "checkpoint any more: a checkpoint lost later would read them again",
            query_id,
            root,
            batch_id,
        )
        return []
    if files:
        log.info("query %s reaches table %s at its batch %d: its %d earlier input file(s) are recorded as read", query_id, root, batch_id, len(files))
    return files
