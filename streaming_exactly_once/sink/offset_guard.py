"""Keep a batch of a partitioned source (Kafka) from duplicating or skipping what the table holds.

A query that starts on a table with history - a recreated checkpoint, a new query, or one whose
``startingOffsets`` was set by hand - may start below the table's high-water marks (from
``earliest``: every committed record again) or above them (from ``latest``: whatever arrived
while no query ran, never written). Spark cannot tell; the table's offsets log can
(``table.source_offsets``). So each batch's start offsets are compared with the marks:

* **overlap**: rows whose offset is below their partition's mark are dropped, row by row, in
  the pass that writes the batch (the batch must carry the offset columns - Kafka's ``topic``,
  ``partition``, ``offset`` - or the sink refuses it: ``OffsetColumnsMissingError``) - once one
  record there is known to be the one the table holds (``sink.record_probe``);
* **reset**: a partition whose offsets went back - its topic deleted and recreated - holds new
  records at old offsets: they are written, and the batch records the reset (the partition's
  mark restarts there). A batch that ends below its start shows it by offsets alone
  (``table.source_offsets.restarted``); one that starts below its query's own last end may also
  be a checkpoint whose offsets were put back, so there, as for a new query, the record
  comparison decides (the same record: a re-read, dropped; no evidence either way: a reset);
* **gap**: a start above the mark is refused (``OffsetGapError``, naming the partitions and
  ranges) unless the sink was built with ``allow_offset_gaps=True``.

A query the table already knows (same checkpoint) continues where its own batches ended
(batches it ran in between may have been empty - nothing to commit - so its gaps are Spark's
business); only another query's newer batches can put it below the marks. A query the table does
not know is checked where the table first sees it: its first batch here is committed even when it
has no rows (``BatchSink``), so from then on it is known. The start of a batch is the previous
batch's end in the query's checkpoint; for a checkpoint's batch 0, per source, the initial offsets
the source recorded (Kafka's does), and for a source that records none the lowest offset per
partition among the batch's rows. A partition with neither has no known start: never taken as its
end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Row, functions as F

from ..checkpoint.offset_seq import OffsetSeq
from ..checkpoint.reader import SparkCheckpoint
from ..commit.table_steps.ledger_step import LedgerInputs
from ..commit.writer import Writer
from ..errors import OffsetColumnsMissingError, OffsetGapError, OffsetResetError
from ..table.source_offsets import (
    PartitionOffsetMap,
    StartCheck,
    check_start,
    describe,
    kafka_json,
    merged_ends,
    merged_starts,
    restarted,
    split_name,
)
from .batch_metrics import BatchObservation
from .record_probe import DIFFERENT, MIXED, SAME, RecordProbe, describe_mismatch

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
        """``topic/partition`` of a row; null for a row without both (another source's, in a union)."""
        topic, partition = F.col(self.topic), F.col(self.partition)
        return F.when(topic.isNotNull() & partition.isNotNull(), F.concat_ws("/", topic.cast("string"), partition.cast("string")))

    def attributed(self) -> Column:
        """Whether a row carries a full coordinate (a partitioned source's record)."""
        return F.col(self.topic).isNotNull() & F.col(self.partition).isNotNull() & F.col(self.offset).isNotNull()


@dataclass
class BatchRows:
    """What one aggregation over the batch's rows says, per partition: the lowest offset, and the
    record at the highest offset below the mark (compared with the table's there)."""

    low: dict[str, int] = field(default_factory=dict)
    probes: dict[str, tuple[int, Row]] = field(default_factory=dict)


class OffsetGuard:
    """The batch without rows below the marks (``df``), checked for gaps and offset resets
    (``resets``: partitions whose records are new although their offsets are not; see the module)."""

    def __init__(
        self,
        df: DataFrame,
        *,
        end: PartitionOffsetMap,
        start: PartitionOffsetMap,
        marks: Mapping[str, int],
        own_ends: Mapping[str, int],
        known_query: bool,
        columns: OffsetColumns,
        allow_gaps: bool,
        table: str,
        query_id: str,
        batch_id: int,
        probe: RecordProbe | None = None,
    ) -> None:
        self.df = df
        self.table, self.query_id, self.batch_id = table, query_id, batch_id
        self._observation: BatchObservation | None = None
        #: the batch passed a gap only because of ``allow_offset_gaps`` (its ledger says so)
        self.gaps_allowed = False
        self._skipped: int | None = None
        #: where the batch starts per partition (as Spark gave it, or its rows' lowest offset), and
        #: partition -> the mark below which this guard drops its rows: for the batch's ledger
        self.start: PartitionOffsetMap = dict(start)
        self.dropped_below: PartitionOffsetMap = {}
        # a batch that ends below its start: the source found the partition behind (a reset);
        # one that starts below its query's own last end: a reset, or its checkpoint's offsets put
        # back - the record probe tells them apart (the same record: a re-read, dropped)
        self.resets = restarted(start, end, {})
        behind = restarted(start, end, own_ends if known_query else {}) - self.resets
        if probe is None:
            self.resets |= behind
            behind = set()
        if self.resets:
            self._say_reset(self.resets, start, end, own_ends, "the offsets went back")
        relevant = {name: mark for name, mark in marks.items() if name in end and name not in self.resets}
        if not relevant:
            return  # the table holds nothing of the partitions this batch reads
        unknown = [name for name in relevant if name not in start]
        below = [name for name in relevant if name in start and start[name] < relevant[name]]
        rows = BatchRows()
        if unknown or (probe is not None and below):
            rows = self._batch_rows(df, columns, relevant, probe, need_low=bool(unknown))
        starts = {name: start[name] if name in start else rows.low.get(name) for name in relevant}
        self.start.update({name: s for name, s in starts.items() if s is not None})
        # a partition the query had read that its previous batch no longer names (the topic deleted,
        # the partition added back later): the source reads it anew from its first record - below
        # the query's own last end, so as a start that went back (``behind``)
        if known_query:
            behind |= {n for n in unknown if n in own_ends and (low := starts[n]) is not None and low < own_ends[n]}
        check = check_start({n: s for n, s in starts.items() if s is not None}, relevant)
        if not known_query:
            if check.gaps:
                self._refuse_gap(check, relevant, allow_gaps)
            blind = {n: (relevant[n], end[n]) for n, s in starts.items() if s is None and end[n] > relevant[n]}
            if blind:
                self._refuse_blind(blind, relevant, allow_gaps)
        overlaps = dict(check.overlaps)
        verdicts = self._probe(df, probe, columns, {n: rows.probes[n] for n in overlaps if n in rows.probes}) if overlaps and probe else {}
        new = {n for n, kind in verdicts.items() if kind == DIFFERENT}
        if new:
            self.resets |= new
            self._say_reset(new, starts, end, {}, "its records there are not the ones the table holds")
        went_back = {n for n in behind if verdicts.get(n) != SAME}  # no evidence of a re-read: the offsets decide
        if went_back:
            self.resets |= went_back
            self._say_reset(went_back, self.start, end, own_ends, "the offsets went back")
        for name in new | went_back:
            overlaps.pop(name, None)
        if overlaps:
            self.df = self._drop_overlap(df, StartCheck(overlaps, {}), columns)
            self.dropped_below = {name: relevant[name] for name in overlaps}

    def _batch_rows(self, df: DataFrame, columns: OffsetColumns, marks: Mapping[str, int], probe: RecordProbe | None, *, need_low: bool) -> BatchRows:
        """One aggregation over the batch (as the table stores it, when probing)."""
        missing = columns.missing(df)
        if missing:
            if not need_low:
                return BatchRows()  # the overlap is refused by name when it is dropped
            raise OffsetColumnsMissingError(
                f"Batch {self.batch_id} of query {self.query_id} reads partitions the table {self.table} already holds "
                f"records of, and the sink cannot tell where it starts: the batch has no column(s) {missing}. Keep the "
                "source's topic, partition and offset columns in the batch (or name yours with offset_columns=), or "
                "start the query from the table's offsets: sink.starting_offsets() gives its startingOffsets.",
                batch_id=self.batch_id,
                table=self.table,
            )
        fitted = probe.project(df) if probe is not None else df
        offset = F.col(columns.offset)
        below = F.element_at(F.create_map(*[x for n, m in sorted(marks.items()) for x in (F.lit(n), F.lit(m))]), columns.key())
        aggs = [F.min(offset).alias("low")]
        compared = probe.compared(fitted, (columns.topic, columns.partition, columns.offset)) if probe is not None else []
        if compared:
            under = F.when(offset < below, offset)
            aggs += [F.max(under).alias("at"), F.max_by(F.struct(*[F.col(c) for c in compared]), under).alias("record")]
        grouped = fitted.where(columns.attributed()).groupBy(columns.key().alias("p")).agg(*aggs)
        out = BatchRows()
        for row in grouped.where(F.col("p").isin(list(marks))).collect():
            out.low[str(row["p"])] = int(row["low"])
            if compared and row["at"] is not None:
                out.probes[str(row["p"])] = (int(row["at"]), row["record"])
        return out

    def _probe(self, df: DataFrame, probe: RecordProbe, columns: OffsetColumns, probes: dict[str, tuple[int, Row]]) -> dict[str, str]:
        """How each overlapping partition's record compares with the table's (``sink.record_probe``:
        ``SAME``, ``DIFFERENT``, ``UNKNOWN``); refuses a batch whose record agrees with the table's
        in some columns and not in others."""
        if not probes:
            return {}
        fitted = probe.project(df)
        names = (columns.topic, columns.partition, columns.offset)
        verdicts = probe.verdicts(fitted, probes, probe.compared(fitted, names), names)
        mixed = [v for v in verdicts.values() if v.kind == MIXED]
        if mixed:
            raise OffsetResetError(
                f"Batch {self.batch_id} of query {self.query_id} reads offsets the table {self.table} holds records at, "
                f"and its records there agree with the table's in some columns only ({describe_mismatch(mixed)}). The sink "
                "cannot tell a topic deleted and recreated (new records at old offsets: to be written) from a re-read of "
                "the same records whose differing columns are computed anew on each run (a timestamp, a uuid: to be "
                "dropped). Nothing was written. Name the columns that make a record with record_columns=[...] (the "
                "source's key, value or timestamp), or restart the query from the table's offsets (sink.starting_offsets()).",
                batch_id=self.batch_id,
                table=self.table,
                partitions=sorted((v.partition for v in mixed), key=split_name),
            )
        return {name: v.kind for name, v in verdicts.items()}

    def _say_reset(self, names: set[str], start: Mapping[str, int | None], end: Mapping[str, int], own: Mapping[str, int], why: str) -> None:
        for name in sorted(names, key=split_name):
            was = own.get(name)
            log.warning(
                "batch %d of query %s: partition %s restarted its offsets (%s; it reads [%s, %s)%s): a topic deleted and "
                "recreated? Its records are written as new, and table %s's offsets of %s restart with this batch",
                self.batch_id,
                self.query_id,
                name,
                why,
                start.get(name),
                end.get(name),
                f", the query's last batch had read it up to {was}" if was is not None else "",
                self.table,
                name,
            )

    def ledger_inputs(self, offset_columns: Sequence[str]) -> LedgerInputs:
        """What the batch's ledger records of this guard's verdict."""
        return LedgerInputs(start=self.start, dropped_below=self.dropped_below, offset_columns=tuple(offset_columns), gaps_allowed=self.gaps_allowed)

    def _refuse_gap(self, check: StartCheck, marks: Mapping[str, int], allow_gaps: bool) -> None:
        if allow_gaps:
            self.gaps_allowed = True
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

    def _refuse_blind(self, ranges: dict[str, tuple[int, int]], marks: Mapping[str, int], allow_gaps: bool) -> None:
        """A partition read beyond its mark, with no rows in the batch and no recorded start."""
        if allow_gaps:
            self.gaps_allowed = True
            log.warning(
                "batch %d of query %s: where it starts in %s is unknown (allow_offset_gaps=True)", self.batch_id, self.query_id, describe(ranges)
            )
            return
        raise OffsetGapError(
            f"Batch {self.batch_id} of query {self.query_id} reads {describe(ranges)} beyond the records table "
            f"{self.table} holds, and the sink cannot tell where it started there: its source recorded no start "
            "offsets and the batch has no rows of those partitions (a filter removed them?). If the query started at "
            "or below the table's offsets nothing is missing; if above, records were never written. Nothing was "
            f"written. Restart the query from the table's offsets - startingOffsets={kafka_json(dict(marks))} "
            "(sink.starting_offsets()) - with a source that records where it starts (Kafka's does), or build the sink "
            "with allow_offset_gaps=True to accept it.",
            batch_id=self.batch_id,
            table=self.table,
            partitions=sorted(ranges, key=split_name),
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
        below = F.element_at(F.create_map(*pairs), columns.key())
        # a row without a full coordinate (another source's, in a union) is no partition's record: kept
        skip = F.coalesce(F.col(columns.offset) < below, F.lit(False))
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


def batch_start(
    query_id: str, batch_id: int, checkpoint: SparkCheckpoint | None, batch_ends: dict[str, tuple[int, dict[str, int]]]
) -> PartitionOffsetMap:
    """Where the batch starts, per partition whose start is known: the previous batch's end when
    this process saw it (``batch_ends``), else the checkpoint's offsets before it, per source."""
    previous = batch_ends.get(query_id)
    if previous is not None and previous[0] == batch_id - 1:
        return dict(previous[1])
    raw = checkpoint.start_offsets(batch_id) if checkpoint is not None else None
    return merged_starts(raw.values()) if raw else {}


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
    known_query: bool,
    probe: RecordProbe | None = None,
) -> OffsetGuard:
    """The guard of a batch; ``known_query``: the table knows this query (its id and its checkpoint)."""
    end = merged_ends(offsets.offsets) if offsets is not None else {}
    start = batch_start(query_id, batch_id, checkpoint, batch_ends) if end else {}
    batch_ends[query_id] = (batch_id, end)
    own = writer.query_offsets(query_id) if end and known_query else None
    return OffsetGuard(
        df,
        end=end,
        start=start,
        marks=writer.offset_marks() if end else {},
        own_ends=merged_ends(own.source_offsets) if own is not None else {},
        known_query=known_query,
        columns=OffsetColumns(*columns),
        allow_gaps=allow_gaps,
        table=writer.storage.root_uri,
        query_id=query_id,
        batch_id=batch_id,
        probe=probe,
    )
