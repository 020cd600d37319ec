"""A batch log that folds its history into ``<id>.compact`` files and deletes what they cover.

Layout (k = 3; ``log.compaction`` has the arithmetic)::

    0  1  2.compact  3  4  5.compact  6  7

A compact file has the same bytes as a delta (``v1`` + one JSON record per line); it holds
what ``fold`` makes of the previous compact file, the deltas after it and its own records.
``fold`` defaults to Spark's rule - keep every record, in order - and concrete logs override it
(the commits log, for example, keeps only the latest record per query).

Retention: after each ``add`` the writer may call ``delete_expired``, which deletes batch files
below the compact file that covers the last ``min_batches_to_retain`` batches, but only files
older than ``cleanup_delay_ms`` (slow readers may still be reading them) and never the last
two compact files (so every reader derives ``k`` from their names; see ``log.compaction``).
The deletion walks ids upward from the lowest undeleted one and stops at the first file that
is still too young, so its cost per batch stays constant as history grows.

A writer may build a compact file ahead of its batch, off the commit path, and attach that
preparation to the log (``preparation``, ``commit.background.compaction_preparation``); ``add`` publishes
such a file when one is ready and otherwise builds the compact file itself, as Spark does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from ..errors import LogConflictError, MissingBatchError
from ..storage.base import ByteRange, Piece, Storage, composed_files, join
from ..storage.io_threads import map_waiting
from .batch_log import COMPACT_SUFFIX, DEFAULT_HINT, BatchLog
from .codec import RecordCodec
from .compaction import (
    all_valid_batches,
    deletable_below,
    interval_from_file_names,
    is_compaction_batch,
    valid_batches_before_compaction,
)
from .preparation import NOT_PREPARED, Preparation
from .version import encode_line, header, parse_version

T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


class CompactibleLog(BatchLog[T], Generic[T]):
    """Batch log with ``.compact`` files every ``interval`` batches and delayed deletion."""

    def __init__(
        self,
        storage: Storage,
        directory: str,
        codec: RecordCodec[T],
        *,
        default_interval: int = 10,
        version: int = 1,
        max_supported_version: int | None = None,
        kind: str = "log",
        hint: str = DEFAULT_HINT,
        retain: Callable[[T, int], bool] | None = None,
    ) -> None:
        super().__init__(storage, directory, codec, version=version, max_supported_version=max_supported_version, kind=kind, hint=hint)
        if default_interval < 1:
            raise ValueError(f"compact interval must be >= 1, got {default_interval}")
        self.default_interval = default_interval
        self.retain = retain
        self._interval: int | None = None
        self._deleted_below: int | None = None
        #: Compact files this object wrote, as (size, mtime_ms) right after writing them: their
        #: every line was checked or copied from a vouched file on the way in (``copy_vouched``).
        self._written_compacts: dict[int, tuple[int, int, str]] = {}
        #: The next compact file, built ahead off the commit path by the writer
        #: (``commit.background.compaction_preparation``); nothing is prepared unless it attaches one.
        self.preparation: Preparation = NOT_PREPARED
        #: What else a writer takes as proof that a compact file it did not write itself was
        #: checked line by line as it is now (``copy_vouched``); None: nothing else.
        self.vouch: Callable[[int], bool] | None = None
        #: Told, before a compact file is written, the earlier records it leaves out (``drop``
        #: and ``retain``) and the time; None: nobody needs to know (the manifest records them,
        #: ``manifest.retired``).
        self.on_drop: Callable[[int, list[T], int], None] | None = None

    # -- interval and naming -----------------------------------------------------------------

    @property
    def interval(self) -> int:
        """``k``, derived once from the ``.compact`` file names exactly as Spark does."""
        interval = self._interval
        if interval is None:
            interval = self._derive_interval(super().list_batch_files())
        return interval

    def know_interval(self, interval: int) -> None:
        """Take ``interval`` as derived already (a reader that saved it from an earlier listing):
        naming a batch file then needs no listing of the directory."""
        if interval < 1:
            raise ValueError(f"compact interval must be >= 1, got {interval}")
        self._interval = interval

    def _derive_interval(self, found: dict[int, str]) -> int:
        compact_ids = [bid for bid, name in found.items() if name.endswith(COMPACT_SUFFIX)]
        self._interval = interval_from_file_names(compact_ids, self.default_interval)
        return self._interval

    def list_batch_files(self) -> dict[int, str]:
        """As ``BatchLog.list_batch_files``; the first listing also derives ``interval``, so a
        reader that lists the log and then reads it lists the directory once."""
        found = super().list_batch_files()
        if self._interval is None:
            self._derive_interval(found)
        return found

    def gaps(self, ids: Iterable[int] | None = None) -> list[int]:
        """As ``BatchLog.gaps``, counted above the latest compact file only. No reader needs a
        file below it, and retention's deletes there, if a power cut comes before their
        directory is synced, may come back in any subset: such a gap loses nothing."""
        present = sorted(set(self.list_batch_ids() if ids is None else ids))
        missing = super().gaps(present)
        compacts = [b for b in present if is_compaction_batch(b, self.interval)]
        return [b for b in missing if b > compacts[-1]] if compacts else missing

    def file_name(self, batch_id: int) -> str:
        if is_compaction_batch(batch_id, self.interval):
            return f"{batch_id}{COMPACT_SUFFIX}"
        return str(batch_id)

    # -- folding -----------------------------------------------------------------------------

    def fold(self, previous: Iterable[T], new: Sequence[T], now: int) -> Iterable[T]:
        """Records of a compact file from everything before it and its own records."""
        retain = self.retain
        if retain is None:
            yield from previous
        else:
            for record in previous:
                if retain(record, now):
                    yield record
        yield from new

    def iter_batches(self, batch_ids: Iterable[int], *, context: str) -> Iterator[T]:
        for batch_id in batch_ids:
            records = self.get(batch_id)
            if records is None:
                raise MissingBatchError(directory=self.uri(), missing=[batch_id], context=context, hint=self.hint)
            yield from records

    # -- writes ------------------------------------------------------------------------------

    #: True when ``fold`` is plain concatenation (Spark's rule, no retention filter): compaction
    #: then copies the previous files' bytes instead of decoding and re-encoding every record.
    fold_is_concatenation: bool = True

    def raw_body(self, batch_id: int, *, context: str) -> memoryview:
        """The bytes after the header of a batch file (from the header's newline, without the
        last newline), checked line by line but not decoded.

        The previous compact file can hold millions of entries; copying its lines costs a
        fraction of decoding them. Each line must still look like one JSON object, so a damaged
        file is reported (with its name) instead of being copied into the next compact file.
        Deltas are small and fully decoded.

        Memory: the result is a view of the file's bytes, not a copy, and the check counts
        separators instead of splitting a million lines - JSON text holds no raw newline, so
        "every line is ``{...}``" is "the body starts with ``{``, ends with ``}``, and every
        newline in it stands in ``}\\n{``".

        CRLF line ends (``log.version``): Spark reads them, so they are read
        here too, and written as plain ``\\n``: a header ``v1\\r`` is a header, and a body with
        ``\\r\\n`` (which fails the cheap check) is copied once with ``\\n`` instead - a record
        line holds no raw ``\\r`` of its own (JSON escapes it in strings), so the compact file
        is byte for byte the one written from the same log with ``\\n``.
        """
        path = self.path(batch_id)
        try:
            data = self.storage.read_bytes(path)
        except FileNotFoundError:
            raise MissingBatchError(directory=self.uri(), missing=[batch_id], context=context, hint=self.hint) from None
        if not is_compaction_batch(batch_id, self.interval):
            self.decode(data, batch_id=batch_id)
        newline = data.find(b"\n")
        head = data if newline < 0 else data[:newline]
        if not data:
            self.decode(data, batch_id=batch_id)  # raises the precise "empty file" error
        parse_version(
            head.decode("utf-8", "replace"),
            path=self.uri(batch_id),
            batch_id=batch_id,
            max_supported=self.max_supported_version,
            hint=self.hint,
        )
        if newline < 0:
            return memoryview(b"")
        found = data
        if not _one_object_per_line(data, newline) and b"\r\n" in data:
            data = data.replace(b"\r\n", b"\n")  # a copy, for a file with CRLF line ends only
            newline = data.find(b"\n")
        if not _one_object_per_line(data, newline):
            self.decode(found, batch_id=batch_id)  # raises with the exact line and problem
        end = len(data) - 1 if data.endswith(b"\n") else len(data)
        return memoryview(data)[newline:end]

    #: Below this size the previous compact file is read and checked line by line (``raw_body``);
    #: from it on, a storage with ``ComposedFiles`` copies it itself (``compact_range``).
    copy_threshold: int = 1 << 20

    def compact_range(self, batch_id: int, *, context: str) -> ByteRange | None:
        """Compact file ``batch_id`` as a range for the storage to copy, or None: read it with
        ``raw_body``.

        The range is the file from its first byte to its last record (a final newline left
        out), so it is exactly ``header`` + ``raw_body`` - as long as the file's first line *is*
        this log's header, byte for byte, which is checked (any other first line is left to
        ``raw_body``).

        What is checked (cost flat with history): the file must be vouched for
        (``copy_vouched``: for the manifest, an index built from the file as it is now, whose
        builder parsed every line), its header, and its last record, which must be complete
        and decode. Re-reading the lines on the commit path is the very cost a storage-side
        copy removes (63 MB at 250k live files); without a voucher the file is read and checked
        by ``raw_body`` as before, so damage done to a file at rest stops the writer with a
        named error instead of being copied forward. Files below ``copy_threshold`` take the
        ``raw_body`` path too.
        """
        if not is_compaction_batch(batch_id, self.interval):
            return None
        path = self.path(batch_id)
        try:
            size = self.storage.info(path).size
        except FileNotFoundError:
            raise MissingBatchError(directory=self.uri(), missing=[batch_id], context=context, hint=self.hint) from None
        if size < self.copy_threshold or not self.copy_vouched(batch_id):
            return None
        head = header(self.version) + b"\n"
        if self.storage.read_head(path, len(head)) != head:
            return None
        tail = self.storage.read_tail(path, 64 * 1024)
        end = size - 1 if tail.endswith(b"\n") else size
        body_tail = tail[: len(tail) - (size - end)]
        if b"\n" not in body_tail:
            return None  # one record longer than the tail read: let raw_body look at it
        last = body_tail.rsplit(b"\n", 1)[1]
        if not (last.startswith(b"{") and last.endswith(b"}")):
            return None
        self.decode(head + last, batch_id=batch_id)  # a cut-short or damaged last record raises here
        return ByteRange(path, 0, end)

    def copy_vouched(self, batch_id: int) -> bool:
        """Whether every line of compact file ``batch_id`` *as it is now* was checked since it
        was written, so that the storage may copy it unread (``compact_range``). Otherwise its
        lines are read by ``raw_body``, which checks each one: a file damaged at rest must stop
        the writer with a named error, never be copied forward into the next compact file.

        Here: a compact file this object wrote itself, unchanged since (``note_written_compact``):
        every byte of it came from a checked delta, its own records or a range that was vouched
        in turn, so the chain needs no re-reading. Unchanged means the same size, mtime and
        ``FileInfo.change`` - on a local disk the inode and status-change time, which a rewrite
        moves even when it keeps the size and sets the mtime back (``cp -p``, a restore). A
        storage that knows only size and mtime vouches for nothing here (an
        in-place rewrite of the same size within the same mtime tick would pass); nor does a
        log object that did not write the file - unless its writer gave it a ``vouch`` (the
        manifest's: a matching reader index, ``manifest.manifest_index.index_matches``)."""
        return self.wrote_compact(batch_id) or (self.vouch is not None and self.vouch(batch_id))

    def wrote_compact(self, batch_id: int) -> bool:
        """Whether this object wrote compact file ``batch_id`` - as header + the previous
        compact file's body + the deltas' bodies (``raw_body``) + its own records, the only
        way it writes one - and the file is unchanged since (``copy_vouched`` says what
        unchanged means)."""
        written = self._written_compacts.get(batch_id)
        if written is None or not written[2]:
            return False
        try:
            info = self.storage.info(self.path(batch_id))
        except FileNotFoundError:
            return False
        return (info.size, info.mtime_ms, info.change) == written

    def note_written_compact(self, batch_id: int) -> None:
        """Remember compact file ``batch_id``, just written by this object (``copy_vouched``);
        only the newest two are kept, since a compaction copies only the one before it."""
        info = self.storage.info(self.path(batch_id))
        written = self._written_compacts
        written[batch_id] = (info.size, info.mtime_ms, info.change)
        for old in sorted(written)[:-2]:
            del written[old]

    def compact_pieces(self, batch_id: int, own_tail: bytes, *, context: str, copy: bool) -> list[Piece]:
        """Compact file ``batch_id`` of a concatenating log as pieces: the previous compact file
        (a ``ByteRange`` where ``copy`` and ``compact_range`` allow, else header + its body), the
        deltas' bodies and ``own_tail``. Their concatenation is the file's bytes either way."""
        pieces: list[Piece] = [header(self.version)]
        folded = list(valid_batches_before_compaction(batch_id, self.interval))
        copied = self.compact_range(folded[0], context=context) if copy and folded else None
        if copied is not None:
            pieces, folded = [copied], folded[1:]  # the range starts with the very same header
        pieces += self.raw_bodies(folded, context=context)
        pieces.append(own_tail)
        return pieces

    def raw_bodies(self, batch_ids: Sequence[int], *, context: str) -> list[memoryview]:
        """``raw_body`` of each batch, in order. On an object store side by side: each read is a
        round trip (~10 ms each on moto's server, nine deltas before every compaction)."""
        if self.storage.scheme == "file":
            return [self.raw_body(b, context=context) for b in batch_ids]
        return map_waiting("log-reads", lambda b: self.raw_body(b, context=context), batch_ids)  # one pool per process

    def add(self, batch_id: int, records: Sequence[T], *, durable: bool = True, drop: Callable[[T], bool] | None = None) -> bool:
        """A delta file as ``BatchLog.add``; a compact file is always written durably, whatever
        ``durable`` says: retention deletes the files it folds in, and its bytes, which depend
        on the clock where a retention filter applies, cannot be rebuilt to repair a tear.

        ``drop``: a compact file that also leaves out the earlier records it selects (a
        compaction batch's rewrites, ``commit.rewrites.data_compaction``). It is folded from the parsed
        records, never from a prepared or copied file, which hold the dropped ones."""
        if not is_compaction_batch(batch_id, self.interval):
            if drop is not None:
                raise ValueError(f"batch {batch_id} of {self.uri()} is no compaction batch (interval {self.interval}): nothing to drop")
            return super().add(batch_id, records, durable=durable)
        context = f"needed to compact batch {batch_id} (compact interval {self.interval})"
        own_tail = b"".join(b"\n" + encode_line(self.codec.to_json(r)) for r in records)
        if drop is None and self.preparation.holds(batch_id):
            published = self.preparation.publish(batch_id, own_tail, context=context)
            if published is not None:
                self._note(batch_id)
                self.note_written_compact(batch_id)
                return published
        path = self.path(batch_id)
        if self.fold_is_concatenation and self.retain is None and drop is None:
            composed = composed_files(self.storage)
            pieces = self.compact_pieces(batch_id, own_tail, context=context, copy=composed is not None)
            try:
                if composed is not None and isinstance(pieces[0], ByteRange):
                    # the previous compact file is copied by the storage, never read here
                    composed.put_composed_if_absent(path, pieces)
                else:
                    # streamed, never joined: the previous compact file is in memory once
                    with self.storage.open_exclusive(path) as fh:
                        for piece in pieces:
                            assert not isinstance(piece, ByteRange)
                            fh.write(piece)
            except FileExistsError:
                # Concatenating logs are deterministic: another writer's compact file must be
                # these very bytes.
                self._check_same(path, batch_id, _same_bytes(self.storage.read_bytes(path), self._materialized(pieces)))
                return False
            self.note_written_compact(batch_id)
        else:
            previous = self.iter_batches(valid_batches_before_compaction(batch_id, self.interval), context=context)
            now, dropped = now_ms(), list[T]()
            if self.on_drop is not None:
                previous = _leaving(previous, drop, self.retain, now, dropped)
            elif drop is not None:
                previous = (r for r in previous if not drop(r))
            lines = [encode_line(self.codec.to_json(r)) for r in self.fold(previous, records, now)]
            if dropped and self.on_drop is not None:
                self.on_drop(batch_id, dropped, now)  # recorded before the compact file leaves them out
            data = header(self.version) + b"".join(b"\n" + line for line in lines)
            try:
                self.storage.put_if_absent(path, data)
            except FileExistsError:
                existing = self.storage.read_bytes(path)
                # With a retention filter the kept records depend on the clock, so only the
                # header and our own records at the end can be compared.
                same = existing == data or (existing.startswith(header(self.version) + b"\n") and bool(own_tail) and existing.endswith(own_tail))
                self._check_same(path, batch_id, same)
                return False
        self._note(batch_id)
        return True

    def rewrite_durably(self, batch_id: int, records: Sequence[T]) -> None:
        """``BatchLog.rewrite_durably`` for a delta file; a compact file is always written
        durably (``add``) and is left as it is."""
        if not is_compaction_batch(batch_id, self.interval):
            super().rewrite_durably(batch_id, records)

    def rewrite_torn(self, batch_id: int, records: Sequence[T]) -> bool:
        """``BatchLog.rewrite_torn`` for a delta file; a compact file is never written without
        its sync (``add``), so one that differs is a conflict, not a tear."""
        if is_compaction_batch(batch_id, self.interval):
            return False
        return super().rewrite_torn(batch_id, records)

    def _materialized(self, pieces: Sequence[Piece]) -> list[bytes | memoryview]:
        """``pieces`` with every range read: only after losing a create, which is rare."""
        out: list[bytes | memoryview] = []
        for piece in pieces:
            if isinstance(piece, ByteRange):
                out.append(memoryview(self.storage.read_bytes(piece.path))[piece.offset : piece.offset + piece.length])
            else:
                out.append(piece)
        return out

    def _check_same(self, path: str, batch_id: int, same: bool) -> None:
        """After losing the create of compact file ``batch_id`` to another writer: its file must
        be the one this writer would have written, else the log has two writers."""
        if not same:
            raise LogConflictError(
                path=self.storage.uri(path),
                batch_id=batch_id,
                hint=f"Only one writer may write the {self.kind}; stop the other writer.",
            )
        self._note(batch_id)

    def write_empty_baseline(self, latest: int) -> None:
        """Empty files for batches ``..latest`` of the current snapshot (adopting a table whose
        earlier batches this log never saw), so that later compactions find what they merge."""
        for batch_id in all_valid_batches(latest, self.interval):
            try:
                self.storage.put_if_absent(self.path(batch_id), header(self.version))
            except FileExistsError:
                pass
        self._note(latest)

    # -- reads -------------------------------------------------------------------------------

    def valid_batches(self, as_of: int | None = None) -> range:
        """Ids of the files that make up the state as of ``as_of`` (default: the latest)."""
        latest = self.latest_batch_id() if as_of is None else as_of
        if latest is None:
            return range(0)
        return all_valid_batches(latest, self.interval)

    def all_records(self, as_of: int | None = None) -> list[T]:
        """Every record visible as of batch ``as_of`` (latest compact file + deltas after it)."""
        ids = self.valid_batches(as_of)
        if not ids:
            return []
        latest = ids[-1]
        return list(
            self.iter_batches(
                ids,
                context=f"needed to read the state as of batch {latest} (compact interval {self.interval})",
            )
        )

    def check_snapshot(self) -> None:
        """Cheap start-up check of the files a reader of the latest state needs.

        Deltas after the latest compact file are decoded completely (they are small); the compact
        file itself - possibly hundreds of MB - is checked at its ends only: the version header
        and a complete last record. A damaged middle is caught by the next compaction or reader.
        """
        for batch_id in self.valid_batches():
            if not is_compaction_batch(batch_id, self.interval):
                self.read(batch_id, context=f"the current {self.kind} state needs it")
                continue
            path = self.path(batch_id)
            try:
                head = self.storage.read_head(path, 64)
            except FileNotFoundError:
                self.read(batch_id, context=f"the current {self.kind} state needs it")
                raise
            tail = self.storage.read_tail(path, 64 * 1024)
            if len(tail) < 64 * 1024 or not head.startswith(b"v"):
                self.decode(self.storage.read_bytes(path), batch_id=batch_id)  # small or odd: decode it all
                continue
            first_line = head.split(b"\n", 1)[0].decode("utf-8", "replace")
            parse_version(first_line, path=self.uri(batch_id), batch_id=batch_id, max_supported=self.max_supported_version, hint=self.hint)
            last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
            self.decode(head.split(b"\n", 1)[0] + b"\n" + last, batch_id=batch_id)

    # -- retention ---------------------------------------------------------------------------

    def delete_expired(self, current: int, *, min_batches_to_retain: int, cleanup_delay_ms: int, now: int | None = None) -> list[int]:
        """Delete files no reader needs any more (see the module docstring); returns their ids."""
        threshold = deletable_below(current, self.interval, min_batches_to_retain)
        if threshold is None:
            return []
        if self._deleted_below is None:
            ids = self.list_batch_ids()
            self._deleted_below = ids[0] if ids else threshold
        expired_before = (now_ms() if now is None else now) - cleanup_delay_ms
        deleted = []
        batch_id = self._deleted_below
        while batch_id < threshold:
            path = join(self.directory, self.file_name(batch_id))
            try:
                info = self.storage.info(path)
            except FileNotFoundError:
                batch_id += 1
                continue
            if info.mtime_ms > expired_before:
                break  # files are written in id order: everything above is younger still
            self.storage.delete(path)
            deleted.append(batch_id)
            batch_id += 1
        self._deleted_below = batch_id
        return deleted


def _leaving(
    previous: Iterable[T], drop: Callable[[T], bool] | None, retain: Callable[[T, int], bool] | None, now: int, dropped: list[T]
) -> Iterator[T]:
    """``previous`` without the records ``drop`` selects or ``retain`` refuses at ``now`` (the
    same test ``fold`` applies), which go to ``dropped``."""
    for record in previous:
        if (drop is not None and drop(record)) or (retain is not None and not retain(record, now)):
            dropped.append(record)
        else:
            yield record


def _one_object_per_line(data: bytes, newline: int) -> bool:
    """Whether every line of ``data`` after its header line (which ends at ``newline``) is
    ``{...}``, one trailing ``\\n`` allowed - without splitting the lines (``raw_body``)."""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    first = newline + 1  # the first record line
    return (
        first < end
        and data[first : first + 1] == b"{"
        and data[end - 1 : end] == b"}"
        and data.count(b"\n", first, end) == data.count(b"}\n{", first, end)
    )


def _same_bytes(existing: bytes, parts: Sequence[bytes | memoryview]) -> bool:
    """Whether ``existing`` is the concatenation of ``parts`` (compared without joining them)."""
    if len(existing) != sum(len(part) for part in parts):
        return False
    view, offset = memoryview(existing), 0
    for part in parts:
        if view[offset : offset + len(part)] != part:
            return False
        offset += len(part)
    return True
