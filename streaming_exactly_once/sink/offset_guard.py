"""Keep a batch of a partitioned source (Kafka) from duplicating or skipping what the table holds.

A query that starts on a table with history - a recreated checkpoint, a new query, or one whose
``startingOffsets`` was set by hand - may start below the table's high-water marks (from
``earliest``: every committed record again) or above them (from ``latest``: whatever arrived
while no query ran, never written). Spark cannot tell; the table's offsets log can
(``table.source_offsets``). So each batch's start offsets are compared with the marks:

* **overlap**: rows whose offset is below their partition's mark are dropped, row by row, in
  the pass that writes the batch (the batch must carry the offset columns - Kafka's ``topic``,
  ``partition``, ``offset`` - or the sink refuses it: ``OffsetColumnsMissingError``);
* **gap**: a start above the mark is refused (``OffsetGapError``, naming the partitions and
  ranges) unless the sink was built with ``allow_offset_gaps=True``.

A query the table already knows continues where its own batches ended (batches it ran in
between may have been empty - nothing to commit - so its gaps are Spark's business); only
another query's newer batches can put it below the marks. The start of a batch is the previous
batch's end in the query's checkpoint; for a checkpoint's batch 0, the initial offsets the
source recorded (Kafka's does), else the lowest offset per partition among the batch's rows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, functions as F

from ..checkpoint.offset_seq import OffsetSeq
from ..checkpoint.reader import SparkCheckpoint
from ..commit.writer import Writer
from ..errors import OffsetColumnsMissingError, OffsetGapError
from ..table.source_offsets import PartitionOffsetMap, StartCheck, check_start, describe, kafka_json, merged_ends, split_name
from .batch_metrics import BatchObservation

log = logging.getLogger("streaming_exactly_once.sink")

SKIPPED = "offsetOverlapRows"


@dataclass(frozen=True)
class OffsetColumns:
    """The batch's columns that say where each row came from (Kafka's names by default)."""

    topic: str = "topic"
    partition: str = "partition"
    offset: str = "offset"

    def missing(self, df: DataFrame) -> list[str]:
        names = set(df.columns)
        return [c for c in (self.topic, self.partition, self.offset) if c not in names]

    def key(self) -> Column:
        return F.concat_ws("/", F.col(self.topic).cast("string"), F.col(self.partition).cast("string"))


class OffsetGuard:
    """The batch without rows below the marks (``df``), checked for gaps (see the module)."""

    def __init__(
        self,
        df: DataFrame,
        *,
        end: PartitionOffsetMap,
        start: PartitionOffsetMap | None,
        marks: Mapping[str, int],
        known_query: bool,
        columns: OffsetColumns,
        allow_gaps: bool,
        table: str,
        query_id: str,
        batch_id: int,
    ) -> None:
        self.df = df
        self.table, self.query_id, self.batch_id = table, query_id, batch_id
        self._observation: BatchObservation | None = None
        self._skipped: int | None = None
        relevant = {name: mark for name, mark in marks.items() if name in end}
        if not relevant:
            return  # the table holds nothing of the partitions this batch reads
        if start is None:
            start = self._lowest_offsets(df, columns, end)
        check = check_start({name: start.get(name, end[name]) for name in end}, relevant)
        if check.gaps and not known_query:
            self._refuse_gap(check, relevant, allow_gaps)
        if check.overlaps:
            self.df = self._drop_overlap(df, check, columns)

    def _lowest_offsets(self, df: DataFrame, columns: OffsetColumns, end: PartitionOffsetMap) -> PartitionOffsetMap:
        """Where the batch starts, read from its rows (a source that records no initial offsets):
        the lowest offset per partition; a partition without rows starts at its end."""
        missing = columns.missing(df)
        if missing:
            raise OffsetColumnsMissingError(
                f"Batch {self.batch_id} of query {self.query_id} reads partitions the table {self.table} already holds "
                f"records of, and the sink cannot tell where it starts: the batch has no column(s) {missing}. Keep the "
                "source's topic, partition and offset columns in the batch (or name yours with offset_columns=), or "
                "start the query from the table's offsets: sink.starting_offsets() gives its startingOffsets.",
                batch_id=self.batch_id,
                table=self.table,
            )
        rows = df.groupBy(columns.key().alias("p")).agg(F.min(F.col(columns.offset)).alias("low")).collect()
        return {str(row["p"]): int(row["low"]) for row in rows if row["p"] is not None}

    def _refuse_gap(self, check: StartCheck, marks: Mapping[str, int], allow_gaps: bool) -> None:
        if allow_gaps:
            log.warning(
                "batch %d of query %s starts after the records table %s holds; skipping %s (allow_offset_gaps=True)",
                self.batch_id,
                self.query_id,
                self.table,
                describe(check.gaps),
            )
            return
        raise OffsetGapError(
            f"Batch {self.batch_id} of query {self.query_id} starts after the records table {self.table} holds: "
            f"records {describe(check.gaps)} were never written (a checkpoint recreated with startingOffsets=latest, "
            "or records the source deleted by retention). Nothing was written. Restart the query from the table's "
            f"offsets - startingOffsets={kafka_json(dict(marks))} (sink.starting_offsets()) - or build the sink with "
            "allow_offset_gaps=True to skip them.",
            batch_id=self.batch_id,
            table=self.table,
            partitions=sorted(check.gaps, key=split_name),
        )

    def _drop_overlap(self, df: DataFrame, check: StartCheck, columns: OffsetColumns) -> DataFrame:
        missing = columns.missing(df)
        if missing:
            raise OffsetColumnsMissingError(
                f"Batch {self.batch_id} of query {self.query_id} re-reads records table {self.table} already holds "
                f"({describe(check.overlaps)}), and cannot drop them row by row: the batch has no column(s) {missing}. "
                "Keep the source's topic, partition and offset columns in the batch (or name yours with "
                "offset_columns=), or restart the query from the table's offsets (sink.starting_offsets()). "
                "Nothing was written.",
                batch_id=self.batch_id,
                table=self.table,
            )
        pairs: list[Column] = []
        for name, (_start, mark) in sorted(check.overlaps.items()):
            pairs += [F.lit(name), F.lit(mark)]
        below = F.coalesce(F.element_at(F.create_map(*pairs), columns.key()), F.lit(-1))
        skip = F.col(columns.offset) < below
        self._observation = BatchObservation(())
        observed = self._observation.attach(df, extra={SKIPPED: F.sum(F.when(skip, 1).otherwise(0))})
        return observed.filter(~skip)

    def skipped_rows(self) -> int:
        """Rows below the marks that were dropped; call it after the batch is written."""
        if self._observation is None:
            return 0
        if self._skipped is not None:  # asked again (the sink's counters): said once
            return self._skipped
        _, _, extra = self._observation.result()
        self._skipped = int(extra.get(SKIPPED) or 0)
        if self._skipped:
            log.warning(
                "batch %d of query %s: dropped %d row(s) the table %s already holds (offsets below its marks)",
                self.batch_id,
                self.query_id,
                self._skipped,
                self.table,
            )
        return self._skipped


def guard_batch(
    df: DataFrame,
    *,
    query_id: str,
    batch_id: int,
    checkpoint: SparkCheckpoint | None,
    offsets: OffsetSeq | None,
    batch_ends: dict[str, tuple[int, dict[str, int]]],
    writer: Writer,
    columns: Sequence[str],
    allow_gaps: bool,
) -> OffsetGuard:
    """The guard of a batch: where it starts is the previous batch's end when this process saw it
    (``batch_ends``, updated here), else the checkpoint's offsets before it."""
    end = merged_ends(offsets.offsets) if offsets is not None else {}
    previous = batch_ends.get(query_id)
    batch_ends[query_id] = (batch_id, end)
    if previous is not None and previous[0] == batch_id - 1:
        start: dict[str, int] | None = previous[1]
    else:
        raw = checkpoint.start_offsets(batch_id) if end and checkpoint is not None else None
        start = merged_ends(raw) if raw is not None else None
    return OffsetGuard(
        df,
        end=end,
        start=start,
        marks=writer.offset_marks() if end else {},
        known_query=writer.knows_query(query_id),
        columns=OffsetColumns(*columns),
        allow_gaps=allow_gaps,
        table=writer.storage.root_uri,
        query_id=query_id,
        batch_id=batch_id,
    )
