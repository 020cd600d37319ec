"""``_seo/ledger/M``: what manifest batch M read, wrote and published - the record ``seo audit`` checks.

One file per batch, one record (``log.record_file``); the byte-for-byte description, with an
example, is ``docs/design/audit-ledger.md``. The record is part of the batch's WAL claim (the
``ledger`` commit step): it is written after the batch's visibility point by the same sequence
that publishes the batch, so a published batch always gets its ledger (a crash rolls the claim
forward) and a discarded claim never leaves one.

What it holds, in short: the source coordinates (per ``topic/partition`` the offsets the batch
covers as half-open ranges, the sub-ranges it did not write as exceptions, and an allowed gap
before it; the input files of file sources), the row counts (read = written + rejected +
dropped, each drop with its reason), every output file with its size, rows and a CRC-32 of its
last ``checksumBytes`` bytes, what each format published, and for a compaction batch the rows
of the files it replaced and of the files it added.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import LogConflictError, LogCorruptError
from ..log.codec import RecordError
from ..log.record_file import encode_record, read_record
from ..storage.base import Storage
from .layout import LEDGER_DIR

VERSION = 1
#: ``LedgerRecord.manifest_retention_ms`` of a ledger written before the field existed
NOT_RECORDED = -1
HINT = (
    "The ledger is the record `seo audit` checks a batch against; nothing reads it to decide what is visible. "
    "`seo audit <table>` reports a batch whose ledger is missing or unreadable."
)


def _pairs(value: Any, name: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in p) for p in value
    ):
        raise RecordError(f"field {name!r} must hold [from, to] pairs of offsets")
    return tuple((int(p[0]), int(p[1])) for p in value)


@dataclass(frozen=True)
class PartitionCoverage:
    """The offsets of one source partition a batch covers: ``ranges`` (half-open ``[from, to)``)
    minus ``exceptions`` (offsets inside them the batch did not write, e.g. already in the table,
    with ``exceptionReason``); ``gapFrom``: the table's mark when the batch started above it
    (offsets ``[gapFrom, ranges[0][0])`` were never read), with ``gapReason``. ``end`` only with no
    ``ranges``: a partition the table never read, from a start the source did not record - only
    where the batch ended is known."""

    partition: str
    ranges: tuple[tuple[int, int], ...]
    exceptions: tuple[tuple[int, int], ...] = ()
    exception_reason: str | None = None
    gap_from: int | None = None
    gap_reason: str | None = None
    end: int | None = None
    #: the partition's offsets restarted at this batch (a topic recreated): its mark restarts here
    reset: bool = False
    #: the partition's records in the batch's output files (counted where a file holds only this
    #: partition's, from the footers: ``table.file_coordinates``) and ``[low, high)`` of their offsets
    rows: int | None = None
    row_offsets: tuple[int, int] | None = None
    #: how many of the query's sources read the partition in this batch (more than one: each
    #: record of it reached the batch that many times - ``table.source_offsets.read_by_several``)
    sources: int = 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partition": self.partition, "ranges": [list(r) for r in self.ranges]}
        if self.end is not None:
            out["end"] = self.end
        if self.reset:
            out["reset"] = True
        if self.exceptions:
            out["exceptions"] = [list(r) for r in self.exceptions]
            out["exceptionReason"] = self.exception_reason
        if self.gap_from is not None:
            out["gapFrom"] = self.gap_from
            out["gapReason"] = self.gap_reason
        if self.sources > 1:
            out["sources"] = self.sources
        if self.rows is not None and self.row_offsets is not None:
            out["rows"] = self.rows
            out["rowOffsets"] = list(self.row_offsets)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PartitionCoverage:
        return cls(
            partition=str(obj["partition"]),
            ranges=_pairs(obj["ranges"], "ranges"),
            exceptions=_pairs(obj.get("exceptions", []), "exceptions"),
            exception_reason=obj.get("exceptionReason"),
            gap_from=None if obj.get("gapFrom") is None else int(obj["gapFrom"]),
            gap_reason=obj.get("gapReason"),
            end=None if obj.get("end") is None else int(obj["end"]),
            reset=bool(obj.get("reset", False)),
            sources=int(obj.get("sources", 1)),
            rows=None if obj.get("rows") is None else int(obj["rows"]),
            row_offsets=None if obj.get("rowOffsets") is None else _pairs([obj["rowOffsets"]], "rowOffsets")[0],
        )

    def written(self) -> list[tuple[int, int]]:
        """``ranges`` minus ``exceptions``, in order (what the batch put in the table)."""
        out: list[tuple[int, int]] = []
        for low, high in self.ranges:
            pieces = [(low, high)]
            for ex_low, ex_high in self.exceptions:
                next_pieces = []
                for p_low, p_high in pieces:
                    if ex_high <= p_low or ex_low >= p_high:
                        next_pieces.append((p_low, p_high))
                        continue
                    if p_low < ex_low:
                        next_pieces.append((p_low, ex_low))
                    if ex_high < p_high:
                        next_pieces.append((ex_high, p_high))
                pieces = next_pieces
            out += [p for p in pieces if p[0] < p[1]]
        return out


@dataclass(frozen=True)
class LedgerFile:
    """One output file: table-relative ``path``, ``size``, ``rows`` (None where unknown) and the
    CRC-32 of its last ``checksum_bytes`` bytes (``checksum_bytes == size``: the whole file)."""

    path: str
    size: int
    rows: int | None
    checksum: str
    checksum_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "rows": self.rows, "checksum": self.checksum, "checksumBytes": self.checksum_bytes}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LedgerFile:
        rows = obj.get("rows")
        return cls(str(obj["path"]), int(obj["size"]), None if rows is None else int(rows), str(obj["checksum"]), int(obj["checksumBytes"]))


@dataclass(frozen=True)
class Compaction:
    """A compaction batch's rewrites: the files it replaced with their rows, the rows it added."""

    replaced: tuple[tuple[str, int | None], ...]
    rows_replaced: int | None
    rows_added: int

    def to_json(self) -> dict[str, Any]:
        return {"replaced": [[p, n] for p, n in self.replaced], "rowsReplaced": self.rows_replaced, "rowsAdded": self.rows_added}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Compaction:
        replaced = tuple((str(p), None if n is None else int(n)) for p, n in obj["replaced"])
        rows = obj.get("rowsReplaced")
        return cls(replaced, None if rows is None else int(rows), int(obj["rowsAdded"]))


@dataclass(frozen=True)
class LedgerRecord:
    """The ledger of manifest batch ``batch_id`` (module docstring; bytes in docs/design/audit-ledger.md)."""

    batch_id: int
    query_id: str
    spark_batch_id: int
    partitions: tuple[PartitionCoverage, ...] = ()
    #: input files of file sources: (URI as Spark names it, size or None, modification time ms or None)
    input_files: tuple[tuple[str, int | None, int | None], ...] = ()
    rows_read: int | None = None
    rows_written: int | None = None
    rows_rejected: int = 0
    rows_dropped: int = 0
    #: why rows were dropped: reason -> rows (``inputFileCommitted``, ``offsetBelowMark``)
    drop_reasons: dict[str, int] = field(default_factory=dict)
    files: tuple[LedgerFile, ...] = ()
    #: what each format published: ``manifest`` (batch id), ``delta`` (version), ``iceberg`` (snapshot id)
    published: dict[str, int | None] = field(default_factory=dict)
    compaction: Compaction | None = None
    #: files batch 0 took over from the directory it was started on (``adopt_existing_files``):
    #: published by the batch, written by another tool, so outside its rows
    adopted: tuple[LedgerFile, ...] = ()
    #: the manifest's entry retention (Spark's ``retention``) when the batch was written: None for
    #: none, so a compact file drops only what compactions replaced; ``NOT_RECORDED`` in ledgers
    #: of writers before the field (the audit then cannot tell an expired entry from a lost one)
    manifest_retention_ms: int | None = NOT_RECORDED

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "batchId": self.batch_id,
            "queryId": self.query_id,
            "sparkBatchId": self.spark_batch_id,
            "partitions": [p.to_json() for p in self.partitions],
            "inputFiles": [{"path": p, "size": s, "mtimeMs": m} for p, s, m in self.input_files],
            "rows": {
                "read": self.rows_read,
                "written": self.rows_written,
                "rejected": self.rows_rejected,
                "dropped": self.rows_dropped,
                "dropReasons": dict(self.drop_reasons),
            },
            "files": [f.to_json() for f in self.files],
            "published": dict(self.published),
        }
        if self.compaction is not None:
            out["compaction"] = self.compaction.to_json()
        if self.adopted:
            out["adopted"] = [f.to_json() for f in self.adopted]
        if self.manifest_retention_ms != NOT_RECORDED:
            out["manifestRetentionMs"] = self.manifest_retention_ms
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LedgerRecord:
        try:
            return cls._from_json(obj)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RecordError(f"not a ledger record: {exc!r}") from None

    @classmethod
    def _from_json(cls, obj: dict[str, Any]) -> LedgerRecord:
        rows = obj["rows"]
        compaction = obj.get("compaction")
        return cls(
            batch_id=int(obj["batchId"]),
            query_id=str(obj["queryId"]),
            spark_batch_id=int(obj["sparkBatchId"]),
            partitions=tuple(PartitionCoverage.from_json(p) for p in obj.get("partitions", [])),
            input_files=tuple((str(f["path"]), f.get("size"), f.get("mtimeMs")) for f in obj.get("inputFiles", [])),
            rows_read=rows.get("read"),
            rows_written=rows.get("written"),
            rows_rejected=int(rows.get("rejected", 0)),
            rows_dropped=int(rows.get("dropped", 0)),
            drop_reasons={str(k): int(v) for k, v in rows.get("dropReasons", {}).items()},
            files=tuple(LedgerFile.from_json(f) for f in obj["files"]),
            published={str(k): (None if v is None else int(v)) for k, v in obj.get("published", {}).items()},
            compaction=None if compaction is None else Compaction.from_json(compaction),
            adopted=tuple(LedgerFile.from_json(f) for f in obj.get("adopted", [])),
            manifest_retention_ms=_retention(obj),
        )

    def to_bytes(self) -> bytes:
        return encode_record(self.to_json(), version=VERSION)


def _retention(obj: dict[str, Any]) -> int | None:
    if "manifestRetentionMs" not in obj:
        return NOT_RECORDED
    value = obj["manifestRetentionMs"]
    return None if value is None else int(value)


def ledger_path(batch_id: int) -> str:
    return f"{LEDGER_DIR}/{batch_id}"


def read_ledger(storage: Storage, batch_id: int) -> LedgerRecord | None:
    """The ledger of batch ``batch_id``; None if the batch has none (``LogCorruptError`` if unreadable)."""
    return read_record(storage, ledger_path(batch_id), LedgerRecord.from_json, hint=HINT, version=VERSION)


def write_ledger(storage: Storage, record: LedgerRecord, *, durable: bool = True) -> None:
    """Create the batch's ledger unless it is there already with the same batch's record (a
    concurrent roll-forward); a ledger of another (query, Spark batch) is a conflict.
    ``durable=False``: without waiting for the disk (the WAL claim can rebuild it)."""
    target = storage if durable else storage.without_sync()
    path = ledger_path(record.batch_id)
    try:
        target.put_if_absent(path, record.to_bytes())
    except FileExistsError:
        try:
            existing = read_ledger(storage, record.batch_id)
        except LogCorruptError:  # torn by a power cut before its sync: only this claim writes it
            storage.atomic_write(path, record.to_bytes())
            return
        if existing is None or (existing.query_id, existing.spark_batch_id) != (record.query_id, record.spark_batch_id):
            raise LogConflictError(path=storage.uri(path), batch_id=record.batch_id, hint=HINT) from None


def ledger_written(storage: Storage, record: LedgerRecord) -> bool:
    """Whether the batch's ledger is there, readable, for the same (query, Spark batch)."""
    try:
        existing = read_ledger(storage, record.batch_id)
    except LogCorruptError:
        return False
    return existing is not None and (existing.query_id, existing.spark_batch_id) == (record.query_id, record.spark_batch_id)
