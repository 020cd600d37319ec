"""``<table>/_seo/retired/N``: the data files the manifest's compact file ``N`` left out, recorded first.

A manifest entry leaves the table's listing only at a compaction batch: ``retention`` drops
entries older than it, and a compaction that rewrites small files drops the files it replaced
(``CompactibleLog.add``). Once the manifest files that still name such a file are deleted (log
retention), nothing of the table would remember that this sink wrote it - and ``seo gc`` deletes
only files it can prove the sink wrote (a file another tool put in the directory is reported,
never deleted). So before the compact file is written, the entries it leaves out are written
here, with the time they left::

    v1
    {"batchId":20,"leftMs":1795313165300}
    {"path":"file:///data/events/day=1/part-00000-<uuid>.c000.snappy.parquet","size":903,"isDir":false,"modificationTime":1795313100000,"blockReplication":1,"blockSize":33554432,"action":"add"}
    ...

Line 2 is the header: the compaction batch and when its entries left the listing (``seo gc``
measures ``--older-than`` from then: a reader that planned before the compaction may still read
them). Each further line is the manifest entry as it was (``manifest.entry``: the same bytes).
A compaction batch rolled forward again, or retried after a failed write, adds its entries to
the record (the union, written anew with one atomic replace, so that a name a failed fsync left
behind is never trusted): naming a file that is still live is harmless - gc deletes only
what no retained manifest file, Delta version, Iceberg snapshot or pending commit names - and
losing one only keeps a file. ``seo gc`` deletes a record once no file it names is left.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field as dc_field

from ..errors import LogCorruptError
from ..log.codec import RecordError
from ..log.record_fields import decode, encode, json_field
from ..log.version import encode_file, encode_line, parse_body
from ..storage.base import Storage
from .entry import ManifestEntry, ManifestEntryCodec

DIRECTORY = "_seo/retired"
VERSION = 1
HINT = (
    "A retired-files record only lets `seo gc` delete files the manifest no longer names; without it gc keeps "
    "them. Delete the damaged record (gc then reports its files as not provably the sink's, and keeps them)."
)


@dataclass(frozen=True)
class RetiredHeader:
    batch_id: int = dc_field(metadata=json_field("batchId", int))
    left_ms: int = dc_field(metadata=json_field("leftMs", int))


@dataclass(frozen=True)
class RetiredRecord:
    """The entries compaction batch ``batch_id`` left out of the listing, at ``left_ms``."""

    batch_id: int
    left_ms: int
    entries: tuple[ManifestEntry, ...]

    def to_bytes(self) -> bytes:
        codec = ManifestEntryCodec()
        lines = [encode_line(encode(RetiredHeader(self.batch_id, self.left_ms)))]
        lines += [encode_line(codec.to_json(e)) for e in self.entries]
        return encode_file(VERSION, lines)

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str) -> RetiredRecord:
        _, objects = parse_body(data, path=path, batch_id=None, max_supported=VERSION, hint=HINT)
        if not objects:
            raise LogCorruptError(path=path, batch_id=None, problem="no header record", hint=HINT)
        codec = ManifestEntryCodec()
        try:
            head = decode(RetiredHeader, objects[0])
            entries = tuple(codec.from_json(o) for o in objects[1:])
        except RecordError as exc:
            raise LogCorruptError(path=path, batch_id=None, problem=str(exc), hint=HINT) from None
        return cls(head.batch_id, head.left_ms, entries)


def record_path(batch_id: int) -> str:
    return f"{DIRECTORY}/{batch_id}"


def record_retired(storage: Storage, batch_id: int, entries: Sequence[ManifestEntry], now_ms: int) -> None:
    """Write (or add to) the record of compaction batch ``batch_id`` before its compact file
    leaves ``entries`` out (module docstring)."""
    if not entries:
        return
    path = record_path(batch_id)
    record = RetiredRecord(batch_id, now_ms, tuple(entries))
    try:
        storage.put_if_absent(path, record.to_bytes())
        return
    except FileExistsError:
        pass
    try:
        existing = RetiredRecord.from_bytes(storage.read_bytes(path), path=storage.uri(path))
    except Exception:  # noqa: BLE001 - a damaged record is replaced by what is known now
        existing = RetiredRecord(batch_id, now_ms, ())
    known = {e.path for e in existing.entries}
    merged = RetiredRecord(batch_id, existing.left_ms, (*existing.entries, *(e for e in entries if e.path not in known)))
    # written again even when nothing is added: the existing file is a failed attempt's, whose
    # name a failed fsync may have left not durable (a new name is, once its directory's fsync passes)
    storage.atomic_write(path, merged.to_bytes())


def retired_batches(storage: Storage) -> list[int]:
    """The compaction batches that have a record, oldest first."""
    return sorted(int(e.name) for e in storage.list_dir(DIRECTORY) if not e.is_dir and e.name.isdigit())


def read_retired(storage: Storage, batch_ids: Iterable[int] | None = None) -> list[RetiredRecord]:
    """Every record (or those of ``batch_ids``); a damaged one raises ``LogCorruptError``."""
    out = []
    for batch_id in retired_batches(storage) if batch_ids is None else batch_ids:
        path = record_path(batch_id)
        try:
            data = storage.read_bytes(path)
        except FileNotFoundError:
            continue
        out.append(RetiredRecord.from_bytes(data, path=storage.uri(path)))
    return out
