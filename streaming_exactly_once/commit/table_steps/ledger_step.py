"""The ``ledger`` commit step and how a batch's ledger is built (``table.ledger``; bytes in
``docs/design/audit-ledger.md``).

The ledger is built before the WAL claim - every file of the batch is in hand then (staged, or
at its final name in ``direct`` mode) - and travels in the claim, so whoever rolls the batch
forward writes the same record. Its step is bookkeeping like ``offsets``: written after the
visibility point without waiting for the disk, synced before the claim is deleted; the Delta
version and Iceberg snapshot the batch got are filled in when it runs, as the commit record's.

Cost per file: one read (one request on an object store) and a CRC-32 over what it read and,
for Parquet, the parse of the footer (its row count, and the statistics that say which source
partition's records it holds: ``table.file_coordinates``). A file of at most ``WHOLE_CHECKSUM``
bytes - a tiny batch's files are - is read and checksummed whole, so any changed
byte is caught; a larger one only over its last ``CHECKSUM_TAIL`` bytes, which for Parquet hold
the footer - every column chunk's offsets, sizes and statistics - so any rewrite of the file
changes them, but a flipped byte inside a data page does not (Parquet's page CRCs are the
readers' check for that). The ledger records which bytes the checksum covers (``checksumBytes``).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field as dc_field, replace
from typing import Any

from ...checkpoint.reader import InputFile
from ...log.record_fields import json_field
from ...storage.base import Storage
from ...storage.io_threads import map_waiting
from ...storage.parquet_footer import FIRST_READ, footer_of_tail
from ...table.file_coordinates import PartitionRows, batch_partition_rows, file_partition_rows
from ...table.ledger import Compaction, LedgerFile, LedgerRecord, PartitionCoverage, ledger_path, ledger_written, write_ledger
from ...table.source_offsets import merged_ends
from ..protocol.step import CommitStep, StepContext, register

#: bytes read from the end of an output file larger than ``WHOLE_CHECKSUM`` for its checksum (and Parquet footer)
CHECKSUM_TAIL = FIRST_READ
#: an output file of at most this many bytes is read and checksummed whole (a CRC-32 of 4 MiB
#: took 5 ms of CPU here: a batch of ten such files would have added 50 ms to its commit)
WHOLE_CHECKSUM = 256 << 10


def checksum_of(tail: bytes) -> str:
    return f"crc32:{zlib.crc32(tail) & 0xFFFFFFFF:08x}"


def checksum_span(size: int) -> int:
    """How many of a file's last bytes its ledger checksum covers: all of a file of at most
    ``WHOLE_CHECKSUM`` bytes, else ``CHECKSUM_TAIL``."""
    return size if 0 < size <= WHOLE_CHECKSUM else CHECKSUM_TAIL


def file_entry(storage: Storage, read_at: str, final: str, size: int, rows: int | None = None) -> LedgerFile:
    """The ledger entry of one output file, read at ``read_at`` (its staged name, or its final
    one), recorded under ``final``: one read (``checksum_span``), its CRC-32, the Parquet footer's rows."""
    return file_entry_and_rows(storage, read_at, final, size, rows)[0]


@dataclass(frozen=True)
class StagedRead:
    """What a file's ledger entry needs of its bytes, read once (``read_file``): the checksum
    over its last ``span`` bytes and its Parquet footer (None: not a complete Parquet file)."""

    checksum: str
    span: int
    footer: Any  # a pyarrow FileMetaData, or None


def read_file(storage: Storage, path: str, size: int, *, synced: bool = False) -> StagedRead:
    """One read of ``path`` (``checksum_span``): its checksum and footer. ``synced``: its bytes
    are made durable in the same open - the rename writer reads a staged file's footer for its
    rows before the claim, when the commit would otherwise open it twice more (its sync, its ledger)."""
    span = checksum_span(size)
    tail = storage.read_tail_synced(path, span) if synced else storage.read_tail(path, span)
    return StagedRead(checksum_of(tail), len(tail), footer_of_tail(storage, path, tail))


def file_entry_and_rows(
    storage: Storage,
    read_at: str,
    final: str,
    size: int,
    rows: int | None = None,
    offset_columns: Sequence[str] = (),
    read: StagedRead | None = None,
) -> tuple[LedgerFile, PartitionRows | None]:
    """``file_entry``, and the source partition's records the file holds (from the same footer);
    ``read``: the file as the writer already read it."""
    read = read if read is not None else read_file(storage, read_at, size)
    metadata = read.footer
    footer_rows = None if metadata is None else int(metadata.num_rows)
    entry = LedgerFile(final, size, footer_rows if footer_rows is not None else rows, read.checksum, read.span)
    return entry, file_partition_rows(metadata, final, offset_columns) if offset_columns else None


@dataclass(frozen=True)
class LedgerInputs:
    """What the sink knows of a batch beyond its files: where its source partitions started
    (``start``, as Spark gave it), the partitions whose rows below a mark it dropped
    (``dropped_below``: partition -> mark), rows it rejected by quality gates and why rows were dropped."""

    start: Mapping[str, int] | None = None
    dropped_below: Mapping[str, int] = dc_field(default_factory=dict)
    rows_rejected: int = 0
    drop_reasons: Mapping[str, int] = dc_field(default_factory=dict)
    #: the batch's topic, partition and offset columns (the sink's ``offset_columns``)
    offset_columns: Sequence[str] = ()
    #: the offset guard let a gap pass because the sink allows gaps (``allow_offset_gaps``)
    gaps_allowed: bool = False


def coverage(
    source_offsets: Sequence[str | None],
    start: Mapping[str, int] | None,
    marks: Mapping[str, int],
    *,
    gap_reason: str,
    dropped_below: Mapping[str, int] | None = None,
    resets: frozenset[str] = frozenset(),
    several: Mapping[str, int] | None = None,
) -> tuple[PartitionCoverage, ...]:
    """Per partition the batch read: ``[start, end)``; below the mark the sink dropped rows by
    (``dropped_below``) an exception - only there: a batch that wrote rows below the table's
    mark overlaps it, which the audit reports; above the mark the gap, with ``gap_reason``.
    ``resets``: partitions whose offsets restarted at this batch (no mark before it);
    ``several``: partitions more than one of the batch's sources read, with how many."""
    several = several or {}
    out = []
    for name, high in sorted(merged_ends(source_offsets).items()):
        mark = None if name in resets else marks.get(name)
        low = (start or {}).get(name, mark)
        if low is None:  # a partition the table never read, from where the source does not say
            out.append(PartitionCoverage(name, (), end=high, reset=name in resets, sources=several.get(name, 1)))
            continue
        exceptions: tuple[tuple[int, int], ...] = ()
        gap_from = None
        below = (dropped_below or {}).get(name)
        if below is not None and low < below:
            exceptions = ((low, min(below, high)),)
        if mark is not None and low > mark:
            gap_from = mark
        out.append(
            PartitionCoverage(
                name,
                ((low, high),),
                exceptions,
                "offsetBelowMark" if exceptions else None,
                gap_from,
                gap_reason if gap_from is not None else None,
                reset=name in resets,
                sources=several.get(name, 1),
            )
        )
    return tuple(out)


def build_ledger(
    storage: Storage,
    *,
    batch_id: int,
    query_id: str,
    spark_batch_id: int,
    files: Sequence[tuple[str, str, int, int | None]],
    partitions: tuple[PartitionCoverage, ...],
    input_files: Sequence[InputFile],
    num_rows: int | None,
    num_skipped_rows: int,
    inputs: LedgerInputs,
    compaction: Compaction | None = None,
    rewritten: Sequence[tuple[str, str, int, int | None]] = (),
    reads: Mapping[str, StagedRead] | None = None,
    manifest_retention_ms: int | None = None,
) -> LedgerRecord:
    """The ledger of a batch: ``files`` as (read at, final, size, rows known by the writer);
    ``rewritten``: a compaction batch's new files, likewise; ``reads``: files the writer read
    already (``read_file``), by where they were read; ``manifest_retention_ms``: the entry
    retention that lets a compact file drop an entry besides a compaction (the audit's check)."""
    pool = f"ledger-{storage.root_uri}"
    columns = inputs.offset_columns if partitions else ()
    held = reads or {}

    def entry(f: tuple[str, str, int, int | None]) -> tuple[LedgerFile, PartitionRows | None]:
        return file_entry_and_rows(storage, *f, offset_columns=columns, read=held.get(f[0]))

    in_hand = all(f[0] in held for f in files)  # nothing to read: no pool's round trips
    found = [entry(f) for f in files] if in_hand else map_waiting(pool, entry, list(files))
    entries = [e for e, _ in found] + map_waiting(pool, lambda f: file_entry(storage, *f), list(rewritten))
    own = entries[: len(files)]
    counted = batch_partition_rows(r for _, r in found)
    partitions = tuple(
        replace(p, rows=counted[p.partition].rows, row_offsets=(counted[p.partition].low, counted[p.partition].high)) if p.partition in counted else p
        for p in partitions
    )
    known = [f.rows for f in own]
    written = sum(r for r in known if r is not None) if own and None not in known else num_rows
    dropped = sum(inputs.drop_reasons.values()) if inputs.drop_reasons else num_skipped_rows
    reasons = dict(inputs.drop_reasons) or ({"alreadyWritten": num_skipped_rows} if num_skipped_rows else {})
    if compaction is not None:
        compaction = replace(compaction, rows_added=sum(f.rows or 0 for f in entries[len(files) :]))
    return LedgerRecord(
        batch_id=batch_id,
        query_id=query_id,
        spark_batch_id=spark_batch_id,
        partitions=partitions,
        input_files=tuple((i.path, None, i.timestamp) for i in input_files),
        rows_read=None if num_rows is None else num_rows + dropped + inputs.rows_rejected,
        rows_written=written,
        rows_rejected=inputs.rows_rejected,
        manifest_retention_ms=manifest_retention_ms,
        rows_dropped=dropped,
        drop_reasons=reasons,
        files=tuple(entries),
        compaction=compaction,
    )


def _decode_ledger(obj: Any) -> LedgerRecord:
    return LedgerRecord.from_json(obj)


@register
@dataclass
class WriteLedger(CommitStep):
    """Write ``_seo/ledger/M``: what the batch read, wrote and published (``table.ledger``).

    In the WAL (one line)::

        {"kind":"ledger","record":{"batchId":12,"queryId":"c578917c-...",...}}
    """

    kind = "ledger"
    bookkeeping = True
    sync_deferred = True
    record: LedgerRecord = dc_field(metadata=json_field("record", dict, encode=lambda r: r.to_json(), decode=_decode_ledger))
    #: a dataset group's table the record belongs to (None: the sequence's own table)
    table: str | None = dc_field(default=None, metadata=json_field("table", str, optional=True, omit_default=True))

    def _storage(self, ctx: StepContext) -> Storage:
        if self.table is None or ctx.member_logs is None:
            return ctx.logs.storage
        return ctx.member_logs(self.table).storage

    def _filled(self, ctx: StepContext) -> LedgerRecord:
        published = dict(self.record.published)
        suffix = "" if self.table is None else f":{self.table}"
        delta, iceberg = ctx.notes.get(f"deltaVersion{suffix}"), ctx.notes.get(f"icebergSnapshot{suffix}")
        if delta is not None and published.get("delta") is None and "delta" in published:
            published["delta"] = delta
        if iceberg is not None and published.get("iceberg") is None and "iceberg" in published:
            published["iceberg"] = iceberg
        return replace(self.record, published=published)

    def verify(self, ctx: StepContext) -> bool:
        return ledger_written(self._storage(ctx), self.record)

    def execute(self, ctx: StepContext) -> None:
        write_ledger(self._storage(ctx), self._filled(ctx), durable=not ctx.defer_sync)

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        return [(self._storage(ctx), ledger_path(self.record.batch_id))]

    def rewrite_durably(self, ctx: StepContext) -> None:
        self._storage(ctx).atomic_write(ledger_path(self.record.batch_id), self._filled(ctx).to_bytes())
