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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..errors import LogConflictError, MissingBatchError
from ..storage.base import Storage, join, prepared_files
from .batch_log import COMPACT_SUFFIX, DEFAULT_HINT, BatchLog, parse_batch_file_name
from .codec import RecordCodec
from .compaction import (
    all_valid_batches,
    deletable_below,
    interval_from_file_names,
    is_compaction_batch,
    next_compaction_batch,
    valid_batches_before_compaction,
)
from .version import encode_line, header

T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Preparation:
    """The next compact file, built ahead of time under a hidden name only this writer uses."""

    compact_id: int
    path: str
    included: list[int] = field(default_factory=list)  # batch ids whose bodies are in the file
    size: int = 0  # bytes this writer put in the file: anything else means someone touched it


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
        super().__init__(
            storage, directory, codec, version=version, max_supported_version=max_supported_version, kind=kind, hint=hint
        )
        if default_interval < 1:
            raise ValueError(f"compact interval must be >= 1, got {default_interval}")
        self.default_interval = default_interval
        self.retain = retain
        self._interval: int | None = None
        self._deleted_below: int | None = None
        self._prep_lock = threading.Lock()
        self._prep: _Preparation | None = None
        #: Names this writer's work files (``commit.committer`` sets the lease epoch): writers
        #: never share one, so a fenced writer's late preparation cannot touch its successor's.
        self.preparation_owner = ""

    # -- interval and naming -----------------------------------------------------------------

    @property
    def interval(self) -> int:
        """``k``, derived once from the ``.compact`` file names exactly as Spark does."""
        if self._interval is None:
            compact_ids = [bid for bid, name in self.list_batch_files().items() if name.endswith(COMPACT_SUFFIX)]
            self._interval = interval_from_file_names(compact_ids, self.default_interval)
        return self._interval

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
    concatenates: bool = True

    def _raw_body(self, batch_id: int, *, context: str) -> bytes:
        """The bytes after the header of a batch file, checked line by line but not decoded.

        The previous compact file can hold millions of entries; copying its lines costs a
        fraction of decoding them. Each line must still look like one JSON object, so a damaged
        file is reported (with its name) instead of being copied into the next compact file.
        Deltas are small and fully decoded.
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
        from .version import parse_version

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
            return b""
        body = data[newline:]
        if body.endswith(b"\n"):
            body = body[:-1]
        lines = body[1:].split(b"\n")
        if lines and not all(line[:1] == b"{" and line[-1:] == b"}" for line in lines):
            self.decode(data, batch_id=batch_id)  # raises with the exact line and problem
        return body

    def add(self, batch_id: int, records: Sequence[T]) -> bool:
        if not is_compaction_batch(batch_id, self.interval):
            return super().add(batch_id, records)
        context = f"needed to compact batch {batch_id} (compact interval {self.interval})"
        own_tail = b"".join(b"\n" + encode_line(self.codec.to_json(r)) for r in records)
        if self._prepared_for(batch_id):
            published = self._publish_preparation(batch_id, own_tail, context=context)
            if published is not None:
                return published
        if self.concatenates and self.retain is None:
            parts = [header(self.version)]
            for previous_id in valid_batches_before_compaction(batch_id, self.interval):
                parts.append(self._raw_body(previous_id, context=context))
            parts.append(own_tail)
            data = b"".join(parts)
        else:
            previous = self.iter_batches(valid_batches_before_compaction(batch_id, self.interval), context=context)
            lines = [encode_line(self.codec.to_json(r)) for r in self.fold(previous, records, now_ms())]
            data = header(self.version) + b"".join(b"\n" + line for line in lines)
        path = self.path(batch_id)
        try:
            self.storage.put_if_absent(path, data)
        except FileExistsError:
            existing = self.storage.read_bytes(path)
            # Concatenating logs are deterministic: another writer's compact file must be these
            # very bytes. With a retention filter the kept records depend on the clock, so only
            # the header and our own records at the end can be compared.
            same = existing == data or (
                not (self.concatenates and self.retain is None)
                and existing.startswith(header(self.version) + b"\n")
                and bool(own_tail)
                and existing.endswith(own_tail)
            )
            if not same:
                raise LogConflictError(
                    path=self.storage.uri(path),
                    batch_id=batch_id,
                    hint=f"Only one writer may write the {self.kind}; stop the other writer.",
                ) from None
            self._note(batch_id)
            return False
        self._note(batch_id)
        return True

    def write_empty_baseline(self, latest: int) -> None:
        """Empty files for batches ``..latest`` of the current snapshot (adopting a table whose
        earlier batches this log never saw), so that later compactions find what they merge."""
        for batch_id in all_valid_batches(latest, self.interval):
            try:
                self.storage.put_if_absent(self.path(batch_id), header(self.version))
            except FileExistsError:
                pass
        self._note(latest)

    # -- compaction prepared in the background ---------------------------------------------
    #
    # A compact file is the previous compact file + the deltas after it + its own records, so
    # all but the last few lines are known long before its batch arrives. ``prepare`` (run off
    # the commit path, after each batch) appends what is already known to a hidden work file
    # ``.<id>.compact.<owner>.prep``; the compaction batch then appends only what is missing plus
    # its own records and publishes the file with one no-replace rename. On a table with a million
    # live files that turns "every 10th batch copies 230 MB" into "every batch appends a few
    # lines" - as long as batches are further apart than the copy takes. Same bytes either way.
    #
    # The work file belongs to one writer (its epoch is in the name) and is only ever appended
    # to, never re-created by an append; before publishing, its size must be exactly what this
    # writer wrote. A successor that deleted it at start-up, or anything else that touched it,
    # makes the compaction batch fall back to building the file from the logs - never publish
    # a compact file that differs from what the logs say.

    def _prep_path(self, compact_id: int) -> str:
        owner = f".{self.preparation_owner}" if self.preparation_owner else ""
        return join(self.directory, f".{compact_id}{COMPACT_SUFFIX}{owner}.prep")

    def _prepared_for(self, compact_id: int) -> bool:
        prep = self._prep
        return prep is not None and prep.compact_id == compact_id

    def prepare(self) -> None:
        """Bring the work file of the next compaction up to date (call off the commit path)."""
        store = prepared_files(self.storage)
        if store is None or not (self.concatenates and self.retain is None):
            return
        latest = self.latest_batch_id()
        if latest is None:
            return
        target = next_compaction_batch(latest, self.interval)
        with self._prep_lock:
            prep = self._prep
            fresh = prep is None or prep.compact_id != target
            if prep is None or fresh:
                if prep is not None:
                    self.storage.delete(prep.path)
                prep = _Preparation(target, self._prep_path(target))
                with store.open_prepared(prep.path, append=False) as fh:
                    fh.write(header(self.version))
                prep.size = len(header(self.version))
                self._prep = prep
            needed = [b for b in valid_batches_before_compaction(target, self.interval) if b not in prep.included]
            context = f"needed to prepare compact batch {target}"
            try:
                with store.open_prepared(prep.path, append=True) as fh:
                    for batch_id in needed:
                        if batch_id > latest:
                            break  # not written yet: the compaction batch appends it
                        if prep.included and batch_id != prep.included[-1] + 1:
                            break
                        body = self._raw_body(batch_id, context=context)
                        fh.write(body)
                        prep.size += len(body)
                        prep.included.append(batch_id)
            except FileNotFoundError:
                self._prep = None  # removed by a writer that took over: start afresh next time
                return
            # Flush the big copy (the previous compact) now and the rest just before the
            # compaction batch, not at publish time; the small deltas in between need no fsync
            # of their own (publishing syncs the file anyway), which keeps this thread off the
            # disk while the commit path fsyncs its own files.
            if fresh or latest + 1 >= target:
                store.sync_prepared(prep.path)

    def _publish_preparation(self, compact_id: int, own_tail: bytes, *, context: str) -> bool | None:
        """Publish the prepared file as compact ``compact_id``; None: build it from the logs."""
        with self._prep_lock:
            prep = self._prep
            store = prepared_files(self.storage)
            if prep is None or prep.compact_id != compact_id or store is None:
                return None
            self._prep = None
            try:
                with store.open_prepared(prep.path, append=True) as fh:
                    for batch_id in valid_batches_before_compaction(compact_id, self.interval):
                        if batch_id not in prep.included:
                            body = self._raw_body(batch_id, context=context)
                            fh.write(body)
                            prep.size += len(body)
                    fh.write(own_tail)
                    prep.size += len(own_tail)
                if self.storage.info(prep.path).size != prep.size:
                    self.storage.delete(prep.path)
                    return None  # someone else wrote to it: do not trust a byte of it
                store.publish_prepared(prep.path, self.path(compact_id))
            except FileNotFoundError:
                return None  # deleted by a writer that took over meanwhile
            except FileExistsError:
                self.storage.delete(prep.path)
                return None  # let the ordinary path compare with what is there
            except BaseException:
                self.storage.delete(prep.path)
                raise
        self._note(compact_id)
        return True

    def discard_preparations(self) -> None:
        """Remove work files a crashed writer left (they are hidden, but take space)."""
        self._prep = None
        for entry in self.storage.list_dir(self.directory):
            if entry.name.startswith(".") and entry.name.endswith(".prep"):
                self.storage.delete(entry.path)

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
            from .version import parse_version

            parse_version(first_line, path=self.uri(batch_id), batch_id=batch_id, max_supported=self.max_supported_version, hint=self.hint)
            last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
            self.decode(head.split(b"\n", 1)[0] + b"\n" + last, batch_id=batch_id)

    # -- retention ---------------------------------------------------------------------------

    def delete_expired(
        self, current: int, *, min_batches_to_retain: int, cleanup_delay_ms: int, now: int | None = None
    ) -> list[int]:
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


def compact_file_ids(names: Iterable[str]) -> list[int]:
    """Ids of ``.compact`` files among ``names`` (helper for verification tools)."""
    out = []
    for name in names:
        parsed = parse_batch_file_name(name)
        if parsed and parsed[1]:
            out.append(parsed[0])
    return sorted(out)
