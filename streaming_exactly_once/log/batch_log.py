"""A log of numbered batch files: ``<directory>/0``, ``<directory>/1``, ... (Spark's HDFSMetadataLog).

On disk, one file per batch id, named by the decimal id, holding a version header and one JSON
record per line (``log.version`` shows the bytes). What this layer adds:

* ``add(batch_id, records)`` is **exclusive and idempotent**: it is one ``put_if_absent``;
  if the file already exists with the same bytes it returns ``False`` (a retry of our own
  write), with different bytes it raises ``LogConflictError`` (someone else wrote this batch).
* ``add(..., durable=False)`` returns before the file is durable (``Storage.without_sync``):
  for records something durable can rebuild, synced by the caller before that goes.
  ``rewrite_torn`` repairs what a power cut can leave of such a file: nothing, an empty file,
  a prefix of the records or bytes that do not parse.
* ``get``/``read``/``get_range`` decode with precise errors; ``get_range`` and ``gaps``
  detect gaps, which Spark's reader silently assumes away ("ids are contiguous").
* ``gaps`` costs O(files present), whatever the names: a file more than ``STRAY_DISTANCE``
  ids beyond the one before it (``_spark_metadata/100000000000`` left by a tool or a typo) is
  reported as a stray file, by name, instead of as 10**11 missing batches.
* Files whose name is not a batch id (temp files ``.<name>.<uuid>.tmp``, Hadoop ``.crc``
  side files, anything else) are ignored by listings, as Spark ignores them.

Nothing here lists the directory on the write path: the writer keeps the latest id in memory,
so the per-batch cost does not grow with history.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from ..errors import LogConflictError, LogCorruptError, MissingBatchError
from ..storage.base import Storage, join
from .codec import RecordCodec, RecordError
from .version import encode_file, encode_line, parse_body

T = TypeVar("T")

COMPACT_SUFFIX = ".compact"
#: A compaction work file's name ends so (``commit.background.compaction_preparation``): ``.<N>.compact.e<K>.prep``.
PREP_SUFFIX = ".prep"

#: Batch ids are written one after another and retention deletes from the bottom up, so the
#: only gaps a log can have are a few lost files. Two present ids further apart than this mean
#: the higher file is not one of this log's batches.
STRAY_DISTANCE = 10_000

DEFAULT_HINT = (
    "Restore the file from a backup if you have one; otherwise run `seo verify <table>` to see "
    "what is affected and `seo recover <table>` to rebuild what can be rebuilt safely."
)


def parse_batch_file_name(name: str) -> tuple[int, bool] | None:
    """``"12"`` -> (12, False), ``"9.compact"`` -> (9, True), anything else -> None."""
    compact = name.endswith(COMPACT_SUFFIX)
    stem = name[: -len(COMPACT_SUFFIX)] if compact else name
    if not stem.isdigit() or not stem.isascii():
        return None
    return int(stem), compact


class BatchLog(Generic[T]):
    """Numbered batch files of records of type ``T`` under ``directory`` of a storage."""

    def __init__(
        self,
        storage: Storage,
        directory: str,
        codec: RecordCodec[T],
        *,
        version: int = 1,
        max_supported_version: int | None = None,
        kind: str = "log",
        hint: str = DEFAULT_HINT,
    ) -> None:
        self.storage = storage
        self.directory = directory.strip("/")
        self.codec = codec
        self.version = version
        self.max_supported_version = max_supported_version or version
        self.kind = kind
        self.hint = hint
        self._latest: int | None = None

    # -- naming ------------------------------------------------------------------------------

    def file_name(self, batch_id: int) -> str:
        return str(batch_id)

    def path(self, batch_id: int) -> str:
        return join(self.directory, self.file_name(batch_id))

    def uri(self, batch_id: int | None = None) -> str:
        return self.storage.uri(self.directory if batch_id is None else self.path(batch_id))

    # -- bytes <-> records -------------------------------------------------------------------

    def encode(self, records: Iterable[T]) -> bytes:
        return encode_file(self.version, [encode_line(self.codec.to_json(r)) for r in records])

    def decode(self, data: bytes, *, batch_id: int | None, path: str | None = None) -> list[T]:
        where = self.storage.uri(path) if path else self.uri(batch_id)
        _version, objects = parse_body(data, path=where, batch_id=batch_id, max_supported=self.max_supported_version, hint=self.hint)
        out: list[T] = []
        for number, obj in enumerate(objects, start=2):
            try:
                out.append(self.codec.from_json(obj))
            except RecordError as exc:
                raise LogCorruptError(path=where, batch_id=batch_id, problem=f"line {number}: {exc}", hint=self.hint) from None
        return out

    # -- reads -------------------------------------------------------------------------------

    def get(self, batch_id: int) -> list[T] | None:
        """Records of ``batch_id``, or None if the file does not exist."""
        try:
            data = self.storage.read_bytes(self.path(batch_id))
        except FileNotFoundError:
            return None
        return self.decode(data, batch_id=batch_id)

    def read(self, batch_id: int, *, context: str = "") -> list[T]:
        """Records of ``batch_id``; ``MissingBatchError`` if the file does not exist."""
        records = self.get(batch_id)
        if records is None:
            raise MissingBatchError(
                directory=self.uri(),
                missing=[batch_id],
                context=context or f"{self.kind} batch {batch_id} was asked for",
                hint=self.hint,
            )
        return records

    def list_batch_files(self) -> dict[int, str]:
        """batch id -> file name, for every batch file present (one listing)."""
        found: dict[int, str] = {}
        for entry in self.storage.list_dir(self.directory):
            if entry.is_dir:
                continue
            parsed = parse_batch_file_name(entry.name)
            if parsed is not None:
                found[parsed[0]] = entry.name
        return found

    def list_batch_ids(self) -> list[int]:
        return sorted(self.list_batch_files())

    def latest_batch_id(self, *, refresh: bool = False) -> int | None:
        """Highest batch id present; listed once, then tracked in memory by ``add``."""
        if self._latest is None or refresh:
            ids = self.list_batch_ids()
            self._latest = ids[-1] if ids else None
        return self._latest

    def get_range(self, start: int, end: int) -> Iterator[tuple[int, list[T]]]:
        """Batches ``start..end`` inclusive, in order; a missing one is a ``MissingBatchError``."""
        for batch_id in range(start, end + 1):
            records = self.get(batch_id)
            if records is None:
                present = set(self.list_batch_ids())
                missing = [b for b in range(start, end + 1) if b not in present]
                raise MissingBatchError(
                    directory=self.uri(),
                    missing=missing,
                    context=f"batches {start}..{end} were asked for",
                    hint=self.hint,
                )
            yield batch_id, records

    def gaps(self, ids: Iterable[int] | None = None) -> list[int]:
        """Batch ids missing between the lowest and the highest present (should be empty).

        ``ids``: the ids present, if the caller has just listed them. A stray file (see the
        module docstring) is a ``LogCorruptError`` naming it.
        """
        present = sorted(set(self.list_batch_ids() if ids is None else ids))
        missing: list[int] = []
        for previous, current in itertools.pairwise(present):
            if current - previous > STRAY_DISTANCE:
                name = self.list_batch_files().get(current, str(current))
                raise LogCorruptError(
                    path=self.storage.uri(join(self.directory, name)),
                    batch_id=current,
                    problem=(
                        f"batch file {name} is far beyond the previous batch {previous} "
                        f"({current - previous - 1} batch files would be missing in between): a stray file? move it away"
                    ),
                    hint=(
                        f"Nothing of this library skips batch ids. If the {self.kind} did not write {name}, move it "
                        f"out of {self.uri()} and try again; if it did, restore the batch files in between from a backup."
                    ),
                )
            missing.extend(range(previous + 1, current))
        return missing

    # -- writes ------------------------------------------------------------------------------

    def add(self, batch_id: int, records: Sequence[T], *, durable: bool = True) -> bool:
        """Write batch ``batch_id`` unless present; see the module docstring."""
        return self.add_bytes(batch_id, self.encode(records), durable=durable)

    def add_bytes(self, batch_id: int, data: bytes, *, durable: bool = True) -> bool:
        path = self.path(batch_id)
        storage = self.storage if durable else self.storage.without_sync()
        try:
            storage.put_if_absent(path, data)
        except FileExistsError:
            existing = self.storage.read_bytes(path)
            if existing != data:
                raise LogConflictError(
                    path=self.storage.uri(path),
                    batch_id=batch_id,
                    hint=(
                        f"Only one writer may write the {self.kind}. Stop the other writer; if it "
                        "was a crashed run of this one, `seo recover` reconciles the logs."
                    ),
                ) from None
            self._note(batch_id)
            return False
        self._note(batch_id)
        return True

    def rewrite_torn(self, batch_id: int, records: Sequence[T]) -> bool:
        """Make delta file ``batch_id`` hold ``records``, durably, if what is there is a torn
        write of them; False if it holds other complete records (a conflict the caller reports).

        A file written ``durable=False`` and cut by a power cut before its sync can be missing,
        empty, a prefix of its bytes (a whole prefix of its lines included) or NUL-filled; only
        the writer of batch ``batch_id`` - whose WAL claim is being rolled forward - ever writes
        it, so such a file is rewritten. Records equal to ``records`` count as written, whatever
        bytes an older release chose for them."""
        path = self.path(batch_id)
        try:
            existing = self.storage.read_bytes(path)
        except FileNotFoundError:
            existing = None
        if existing is not None:
            try:
                found = self.decode(existing, batch_id=batch_id)
            except LogCorruptError:
                found = None  # cut mid-line, empty, NUL-filled
            if found is not None:
                if found == list(records):
                    self._note(batch_id)
                    return True
                if found != list(records)[: len(found)]:
                    return False
        self.rewrite_durably(batch_id, records)
        return True

    def rewrite_durably(self, batch_id: int, records: Sequence[T]) -> None:
        """Replace file ``batch_id`` by ``records`` with a durable write (a new inode): for a file
        written ``durable=False`` that is torn, or whose sync failed or may have."""
        self.storage.atomic_write(self.path(batch_id), self.encode(records))
        self._note(batch_id)

    def _note(self, batch_id: int) -> None:
        if self._latest is None or batch_id > self._latest:
            self._latest = batch_id

    def delete(self, batch_id: int) -> None:
        self.storage.delete(self.path(batch_id))
        if self._latest == batch_id:
            self._latest = None

    def purge(self, threshold: int) -> list[int]:
        """Delete every batch file with id < ``threshold``; returns the ids deleted."""
        deleted = []
        for batch_id, name in sorted(self.list_batch_files().items()):
            if batch_id < threshold:
                self.storage.delete(join(self.directory, name))
                deleted.append(batch_id)
        return deleted
