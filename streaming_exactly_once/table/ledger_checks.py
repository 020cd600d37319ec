"""The invariants one batch's ledger must hold by itself, given the table's offsets marks before it.

Shared by the sink's ``audit="enforce"`` (checked before the WAL claim: a violation publishes
nothing) and ``seo audit`` (checked again over the published history). Each violation is a
``Violation`` whose ``check`` names the invariant (``docs/design/audit-ledger.md`` lists them)
and whose ``message`` names the batch, file or offsets and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from .ledger import LedgerRecord, PartitionCoverage

#: gap reasons a batch may record (anything else is a violation): a query whose batches between
#: two commits were empty (Spark read the offsets, no row reached the table), and a gap the sink
#: was told to accept (``allow_offset_gaps=True``)
ALLOWED_GAPS = frozenset({"emptyBatches", "allowOffsetGaps"})


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which check, the batch, a message that names what and says what to do."""

    check: str
    batch_id: int | None
    message: str
    path: str | None = None
    partition: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "batchId": self.batch_id, "message": self.message, "path": self.path, "partition": self.partition}


def row_violations(record: LedgerRecord) -> list[Violation]:
    """Rows conserved (read = written + rejected + dropped) and the files' rows = the rows written."""
    out = []
    m = record.batch_id
    if record.rows_read is not None and record.rows_written is not None:
        accounted = record.rows_written + record.rows_rejected + record.rows_dropped
        if record.rows_read != accounted:
            out.append(
                Violation(
                    "rows",
                    m,
                    f"Batch {m}: {record.rows_read} rows read but {record.rows_written} written + {record.rows_rejected} rejected + "
                    f"{record.rows_dropped} dropped = {accounted}. The output files do not hold the rows the batch counted; "
                    "compare them with the source (seo log --batch) before trusting this batch.",
                )
            )
    paths = [f.path for f in record.files]
    for path in sorted({p for p in paths if paths.count(p) > 1}):
        out.append(Violation("files", m, f"Batch {m} names the data file {path} twice: its rows would be read twice.", path=path))
    comp = record.compaction
    if comp is not None and comp.rows_replaced is not None and comp.rows_replaced != comp.rows_added:
        out.append(
            Violation(
                "compaction",
                m,
                f"Compaction batch {m} replaced files holding {comp.rows_replaced} rows by files holding {comp.rows_added}: "
                "a rewrite lost or duplicated rows. Restore the replaced files' rows from an earlier version (as_of) of the table.",
            )
        )
    return out


def offset_violations(record: LedgerRecord, marks: MutableMapping[str, int], *, gaps_known: bool = True) -> list[Violation]:
    """Per partition: what the batch wrote starts exactly at the table's mark (no overlap, no
    gap unless recorded as allowed); ``marks`` is then raised to the batch's ends.
    ``gaps_known`` False: the batch before has no ledger (a violation of its own), so what lies
    between the mark and this batch's start is that batch's, unknown - not a gap."""
    out = []
    m = record.batch_id
    for part in record.partitions:
        mark = None if part.reset else marks.get(part.partition)
        written = part.written()
        if not part.ranges:
            out += _twice_in_batch(m, part)
            if part.end is not None:
                marks[part.partition] = max(part.end, mark if mark is not None else part.end)
            continue
        end = max(high for _, high in part.ranges)
        first = written[0][0] if written else end
        if mark is not None and first < mark and written:
            out.append(
                Violation(
                    "offsets",
                    m,
                    f"Batch {m} wrote offsets [{first}, {min(mark, written[0][1])}) of {part.partition}, which earlier batches "
                    f"already wrote (they end at {mark}): those records are in the table twice. Find them with seo log; "
                    "the source's offsets overlap.",
                    partition=part.partition,
                )
            )
        elif mark is not None and first > mark and gaps_known:
            allowed = part.gap_from == mark and part.gap_reason in ALLOWED_GAPS
            if not allowed:
                out.append(
                    Violation(
                        "offsets",
                        m,
                        f"Batch {m} starts {part.partition} at offset {first}, but the table holds it only up to {mark}: records "
                        f"[{mark}, {first}) were never written and no allowed gap is recorded. Re-read them from the source "
                        "(startingOffsets at the table's mark) if it still has them.",
                        partition=part.partition,
                    )
                )
        out += _twice_in_batch(m, part)
        for (_, high), (low, _) in zip(written, written[1:], strict=False):
            if low < high:
                out.append(Violation("offsets", m, f"Batch {m} lists overlapping ranges of {part.partition} at {low}.", partition=part.partition))
        marks[part.partition] = max(end, mark if mark is not None else end)
    return out


def _twice_in_batch(m: int, part: PartitionCoverage) -> list[Violation]:
    """A partition several sources of the batch's query read (one topic subscribed twice, a
    union): each of its records reached the batch once per source, above every mark, so no
    offset guard dropped them. (More rows than offsets in ``rowOffsets`` alone is no proof: a
    query may turn one record into several rows, an explode, keeping its offset.)"""
    if part.sources < 2:
        return []
    if part.row_offsets is not None:
        where = f"[{part.row_offsets[0]}, {part.row_offsets[1]})"
    elif part.ranges:
        where = ", ".join(f"[{low}, {high})" for low, high in part.ranges)
    else:
        where = f"up to {part.end}"
    held = f" ({part.rows} rows for offsets {where})" if part.rows is not None else ""
    return [
        Violation(
            "offsets",
            m,
            f"Batch {m} reads {part.partition} through {part.sources} sources of its query: its records {where} are in the "
            f"batch {part.sources} times each{held}. The query subscribes the topic more than once (a union of two "
            "subscriptions of one topic?); read each partition through one source.",
            partition=part.partition,
        )
    ]


def batch_violations(record: LedgerRecord, marks: Mapping[str, int]) -> list[Violation]:
    """Every invariant of the batch alone (``marks``: the table's before it; left unchanged)."""
    return row_violations(record) + offset_violations(record, dict(marks))
