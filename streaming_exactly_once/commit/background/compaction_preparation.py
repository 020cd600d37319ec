"""The next ``.compact`` file of a log, built ahead of time off the commit path.

A compact file is the previous compact file + the deltas after it + its own records, so all but
the last few lines are known long before its batch arrives. ``advance`` (after each batch, off
the commit) appends what is known to a hidden work file of this writer
(``_spark_metadata/.19.compact.e4.prep``); the compaction batch appends the rest and publishes it
with one no-replace rename (``publish``). At a million live files that turns "every 10th batch
copies 230 MB" into "every batch appends a few lines"; the bytes are the same either way. Where a
work file cannot be trusted - someone else wrote to it, its sync failed, its source changed - it
is dropped and the compaction batch builds its file itself.

``docs/design/compaction.md`` ("Preparing the next compact file") has the whole design: the work
file's rules, S3's composed uploads, pacing, back-off and keeping pace with the batches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from ...log.batch_log import COMPACT_SUFFIX, PREP_SUFFIX
from ...log.compactible_log import CompactibleLog
from ...log.compaction import is_compaction_batch, next_compaction_batch, valid_batches_before_compaction
from ...log.version import header
from ...storage.base import ByteRange, ComposedUploads, PendingUpload, PreparedFiles, composed_uploads, join, prepared_files

log = logging.getLogger("streaming_exactly_once.compaction")

#: Bytes of the previous compact file copied (and written back) between two rests.
SLICE_BYTES = 1 << 20
#: Most compactions in a row left to their batch after copies that did not keep up.
MAX_BACKOFF = 8
#: Rest after each slice, as a multiple of the time the slice took (the copy's disk share is
#: 1 / (1 + PACE)); no rest when the compaction batch is the next batch.
PACE = 3.0
#: Longest a committed batch waits for the copy to catch up with it (``keep_pace``).
KEEP_PACE_TIMEOUT_S = 30.0
#: Longest the copy waits for a commit to end before it takes its next slice anyway.
GATE_WAIT_S = 1.0


class CommitGate:
    """Open while the writer commits nothing: the background copy takes the disk only then
    (module docstring, "Keeping pace"). One per writer, shared by its logs' preparations."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    @contextmanager
    def committing(self) -> Iterator[None]:
        """Closed for the duration: a commit is writing."""
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()

    def wait_open(self, timeout: float) -> None:
        self._open.wait(timeout)


class _Obsolete(Exception):
    """The compaction batch a copy is for was committed without it (``_in_slices``)."""


@dataclass
class _WorkFile:
    """One work file: which compact file it becomes and what this writer put in it."""

    compact_id: int
    path: str
    included: list[int] = field(default_factory=list)  # batch ids whose bodies are in the file
    size: int = 0  # bytes this writer wrote: anything else means someone touched it


@dataclass
class _Upload:
    """The next compact file as an upload begun with the previous compact file copied."""

    compact_id: int
    #: copies the first of the batches the compaction folds: the previous compact file
    pending: PendingUpload


class CompactionPreparation:
    """The work file of one log's next compaction (module docstring); one per log object."""

    def __init__(self, log: CompactibleLog[Any]) -> None:
        self.log = log
        #: Names this writer's work files (``commit.committer`` sets the lease epoch): writers
        #: never share one, so a fenced writer's late preparation cannot touch its successor's.
        self.owner = ""
        self._lock = threading.Lock()
        self._work: _WorkFile | None = None
        #: Where the storage has no prepared files but ``ComposedUploads`` (S3): the upload of
        #: the next compact file, its server-side copy of the previous one done (module docstring).
        self._upload: _Upload | None = None
        #: the compaction batch the last ``_advance_upload`` began (or is beginning) an upload for
        self._upload_for: int | None = None
        #: Set while someone waits for the copy (``publish``, ``stop``): no more rests.
        self._hurry = threading.Event()
        #: Set by ``stop``: the writer is closing, and its work file would only be discarded.
        self._stopping = threading.Event()
        #: True while the big copy (or write) of the previous compact file is under way.
        self._copying = False
        #: Back-off after compactions that found the copy unfinished (module docstring).
        self._backoff = 0
        self._skip = 0
        self._skipped_target: int | None = None
        #: The big copy's progress, for ``keep_pace``: which compaction batch it is for (None:
        #: no copy under way), bytes copied, bytes to copy; notified after every slice.
        self._progress = threading.Condition()
        self._copy_for: int | None = None
        self._copy_done = 0
        self._copy_total = 0
        #: The writer's (``commit.committer`` sets it): slices wait for its commits to end.
        self.gate = CommitGate()

    def _path(self, compact_id: int) -> str:
        owner = f".{self.owner}" if self.owner else ""
        return join(self.log.directory, f".{compact_id}{COMPACT_SUFFIX}{owner}{PREP_SUFFIX}")

    def _store(self) -> PreparedFiles | None:
        """The log's storage as ``PreparedFiles``; None where a compaction cannot be prepared."""
        log = self.log
        if not log.fold_is_concatenation or log.retain is not None:
            return None
        return prepared_files(log.storage)

    def _uploads(self) -> ComposedUploads | None:
        """The log's storage as ``ComposedUploads`` where it has no prepared files; else None."""
        log = self.log
        if not log.fold_is_concatenation or log.retain is not None or prepared_files(log.storage) is not None:
            return None
        return composed_uploads(log.storage)

    def holds(self, compact_id: int) -> bool:
        """Whether a work file (or an upload) for compaction batch ``compact_id`` is under way."""
        work, upload = self._work, self._upload
        if self._uploads() is not None:
            return (upload is not None and upload.compact_id == compact_id) or self._upload_for == compact_id
        return work is not None and work.compact_id == compact_id

    def advance(self) -> None:
        """Bring the work file of the next compaction up to date with the log."""
        if self._stopping.is_set():
            return
        store = self._store()
        if store is None:
            uploads = self._uploads()
            if uploads is not None:
                self._advance_upload(uploads)
            return
        log, storage = self.log, self.log.storage
        latest = log.latest_batch_id()
        if latest is None:
            return
        target = next_compaction_batch(latest, log.interval)
        with self._lock:
            work = self._work
            started = work is None or work.compact_id != target
            if started:
                work = self._start(store, target, latest)
                if work is None:
                    return
            assert work is not None
            if not self._append(store, work, target, latest):
                return
            # Flush the big copy (the previous compact) now and the rest just before the
            # compaction batch, not at publish time; the small deltas in between need no fsync
            # of their own (publishing syncs the file anyway), which keeps this thread off the
            # disk while the commit path fsyncs its own files.
            if started or latest + 1 >= target:
                try:
                    store.sync_prepared(work.path)
                except BaseException:
                    # Never synced again and published: Linux marks the pages of a failed
                    # fsync clean, so a second one can succeed with the bytes never written.
                    # The compaction batch builds its file itself, under a new name.
                    self._work = None
                    storage.delete(work.path)
                    raise

    def _start(self, store: PreparedFiles, target: int, latest: int) -> _WorkFile | None:
        """A new work file for compaction batch ``target``, the previous compact file copied into
        it (None: none is prepared for ``target`` now). Called holding ``_lock``."""
        log, storage = self.log, self.log.storage
        if self._work is not None:
            storage.delete(self._work.path)  # an earlier target's file the log no longer needs
            self._work = None
        if self._skipped_target == target or storage.exists(log.path(target)):
            # (the second: published meanwhile - a task that read ``latest`` before the
            # compaction batch was noted must neither copy for it nor use up a skip)
            return None
        if self._skip > 0:  # backing off: compaction batch ``target`` builds its file itself
            self._skip -= 1
            self._skipped_target = target
            return None
        work = _WorkFile(target, self._path(target))
        # The previous compact file - nearly all of the work file - is copied by the
        # storage where it can (``CompactibleLog.compact_range`` says what is checked).
        first = valid_batches_before_compaction(target, log.interval)[0]
        copied = log.compact_range(first, context=f"needed to prepare compact batch {target}") if first <= latest else None
        with store.open_prepared(work.path, append=False) as fh:
            if copied is None:
                fh.write(header(log.version))
        work.size = 0 if copied is not None else len(header(log.version))
        self._work = work
        if copied is not None:
            try:
                self._copy_paced(store, work.path, copied, target)
            except (FileNotFoundError, _Obsolete):
                # The work file was removed by a writer that took over, or the file
                # being copied by retention: start afresh next time. The work file is
                # this writer's alone (its name has the lease epoch), so it goes.
                self._work = None
                storage.delete(work.path)
                return None
            except BaseException:
                self._work = None  # a half-copied work file is never appended to
                storage.delete(work.path)
                raise
            work.size += copied.length
            work.included.append(first)
        return work

    def _append(self, store: PreparedFiles, work: _WorkFile, target: int, latest: int) -> bool:
        """Append to ``work`` the deltas it lacks that exist, in order (False: the work file is
        gone, start afresh next time). Called holding ``_lock``."""
        log, storage = self.log, self.log.storage
        needed = [b for b in valid_batches_before_compaction(target, log.interval) if b not in work.included]
        context = f"needed to prepare compact batch {target}"
        try:
            with store.open_prepared(work.path, append=True) as fh:
                for batch_id in needed:
                    if batch_id > latest:
                        break  # not written yet: the compaction batch appends it
                    if work.included and batch_id != work.included[-1] + 1:
                        break
                    body = log.raw_body(batch_id, context=context)
                    self._write_paced(store, fh, work.path, body, target)
                    work.size += len(body)
                    work.included.append(batch_id)
        except (FileNotFoundError, _Obsolete):
            self._work = None  # removed by a writer that took over, or no longer needed
            storage.delete(work.path)
            return False
        except BaseException:
            self._work = None  # its size no longer says what is in it: never appended to again
            storage.delete(work.path)
            raise
        return True

    def _advance_upload(self, uploads: ComposedUploads) -> None:
        """Begin the next compact file as an upload whose first part the storage copies from
        the previous compact file, once per compaction (S3: ``UploadPartCopy``).

        Why only the copy: it is nearly all of the file (58 MB at 250k live files) and runs on
        the server, so the writer neither sends it nor waits for it; the deltas and the
        compaction batch's own records, a few KB, are sent by the compaction batch as the
        upload's last part (``publish``). No pacing: the copy takes nothing of this machine's
        disk. Nothing is visible until the upload is completed; a writer killed meanwhile leaves
        an invisible upload (the bucket's lifecycle rule for incomplete uploads removes it), and
        its successor begins its own."""
        compactible = self.log
        latest = compactible.latest_batch_id()
        if latest is None:
            return
        target = next_compaction_batch(latest, compactible.interval)
        with self._lock:
            self._upload_for = target  # ``holds``: the compaction batch waits for the copy
            held = self._upload
            if held is not None:
                if held.compact_id == target:
                    return
                self._upload = None
                uploads.abort_composed(held.pending)  # an earlier target's: the log no longer needs it
            first = valid_batches_before_compaction(target, compactible.interval)[0]
            if first > latest or not is_compaction_batch(first, compactible.interval) or compactible.storage.exists(compactible.path(target)):
                return  # no compact file to copy yet, or published meanwhile
            try:
                copied = compactible.compact_range(first, context=f"needed to prepare compact batch {target}")
                pending = uploads.begin_composed(compactible.path(target), copied) if copied is not None else None
            except Exception:  # the compaction batch builds it and says what is wrong, if anything
                log.warning("preparing compact batch %d of %s failed; its batch builds it", target, compactible.uri(), exc_info=True)
                return
            if pending is None:
                return  # not vouched, too small to copy, or an endpoint that is not exclusive
            kept = False
            try:
                current = compactible.latest_batch_id()
                # (not when the writer is closing, or the batch came first)
                kept = not self._stopping.is_set() and (current is None or current < target)
                if kept:
                    self._upload = _Upload(target, pending)
            finally:
                if not kept:  # whatever interrupted: nothing else holds its id
                    uploads.abort_composed(pending)

    def _publish_upload(self, uploads: ComposedUploads, upload: _Upload, own_tail: bytes, *, context: str) -> bool | None:
        """Complete ``upload`` with the deltas' bodies and ``own_tail`` as its last part; None:
        build the file from the logs (another writer's file is there, to be compared)."""
        log_ = self.log
        deltas = valid_batches_before_compaction(upload.compact_id, log_.interval)[1:]  # the first one is copied
        try:
            bodies = log_.raw_bodies(deltas, context=context)
        except BaseException:
            uploads.abort_composed(upload.pending)  # nothing else holds its id: never leave it pending
            raise
        try:
            uploads.complete_composed(upload.pending, b"".join([*bodies, own_tail]))
        except FileExistsError:
            return None  # another writer's file: the ordinary path compares it
        except Exception:
            # Aborted already. The upload may be gone (a lifecycle rule for incomplete uploads
            # removed it while the compaction was far off), or the compact file it
            # copied changed since (``ComposedSourceError``): the batch builds the file itself,
            # measuring and vouching for the previous one anew.
            log.warning(
                "the upload prepared for compact batch %d of %s could not be completed; the batch builds the file itself",
                upload.compact_id,
                log_.uri(),
                exc_info=True,
            )
            return None
        return True

    def _copy_paced(self, store: PreparedFiles, path: str, source: ByteRange, target: int) -> None:
        """Append ``source`` to work file ``path`` a slice at a time, resting between slices
        (module docstring, "Pacing") unless compaction batch ``target`` is next or waits."""
        self._in_slices(
            source.length,
            lambda start, n: store.append_range_prepared(path, ByteRange(source.path, source.offset + start, n)),
            target,
        )

    def _write_paced(self, store: PreparedFiles, fh: IO[bytes], path: str, body: memoryview, target: int) -> None:
        """``fh.write(body)`` for the body of a previous compact file that could not be copied
        (read and checked by ``raw_body``): a slice at a time, each written back, with the
        rests of ``_copy_paced`` - else its one fsync holds every commit beside it (250 ms at a
        million live files, the first compaction after a start)."""
        if len(body) <= SLICE_BYTES:
            fh.write(body)
            return

        def write_slice(start: int, n: int) -> None:
            fh.write(body[start : start + n])
            fh.flush()
            store.sync_prepared(path)

        self._in_slices(len(body), write_slice, target)

    def _in_slices(self, total: int, write_slice: Callable[[int, int], None], target: int) -> None:
        """``write_slice(start, n)`` over ``total`` bytes, ``SLICE_BYTES`` at a time, with the
        rests (``_rest_if_ahead``); ``_copying`` says it is under way (``publish``'s back-off)."""
        self._copying = True
        with self._progress:
            self._copy_for, self._copy_done, self._copy_total = target, 0, total
        try:
            for start in range(0, total, SLICE_BYTES):
                if not self._hurry.is_set():
                    self.gate.wait_open(GATE_WAIT_S)  # (a publish waits inside its commit: no gate then)
                latest = self.log.latest_batch_id()
                if (latest is not None and latest >= target) or self._stopping.is_set():
                    # Built by its own batch meanwhile (back-off, or the copy started late): the
                    # rest of the copy would only hold up the next compaction's. Or the writer
                    # is stopping (``stop``).
                    raise _Obsolete(target)
                began = time.monotonic()
                n = min(SLICE_BYTES, total - start)
                write_slice(start, n)
                with self._progress:
                    self._copy_done = start + n
                    self._progress.notify_all()
                self._rest_if_ahead(began, start + n, total, target)
        finally:
            self._copying = False
            with self._progress:
                self._copy_for = None
                self._progress.notify_all()

    def _rest_if_ahead(self, started: float, done: int, total: int, target: int) -> None:
        """After a slice that began at ``started``: rest ``PACE`` times its time if the copy is
        ahead of the batches (module docstring, "Pacing"), unless it is done, compaction batch
        ``target`` is next, or someone waits for it."""
        latest = self.log.latest_batch_id()
        if done >= total or latest is None or latest + 1 >= target or self._hurry.is_set():
            return
        interval = self.log.interval
        previous = target - interval  # the compaction batch whose file is being copied
        if done * (interval - 1) >= total * max(0, latest - previous):
            self._hurry.wait((time.monotonic() - started) * PACE)

    def keep_pace(self, *, timeout: float = KEEP_PACE_TIMEOUT_S) -> float:
        """Wait until the copy under way is as far as the batches are (module docstring,
        "Keeping pace"): called by the committer after each batch it committed. Returns the
        seconds waited. No copy under way (not started yet, done, or none at all) is no wait:
        the next batch keeps pace with it instead."""
        if self._copy_for is None:
            return 0.0  # (and no listing of a log that has no batch yet)
        latest = self.log.latest_batch_id()
        interval = self.log.interval
        if latest is None or interval < 2:
            return 0.0
        target = next_compaction_batch(latest, interval)
        batches = latest - (target - interval)  # since the previous compaction, this one included
        # One batch of slack: the copy starts after the compaction batch, beside the index build
        # of the file it copies, so the first batch owes nothing and the last owes it all.
        owed, shares = (batches - 1, interval - 2) if interval > 2 else (batches, interval - 1)
        began = time.monotonic()
        with self._progress:
            while self._copy_for == target and self._copy_done * shares < self._copy_total * owed:
                left = began + timeout - time.monotonic()
                if left <= 0:
                    log.warning(
                        "batch %d of %s waited %.0f s for the copy that prepares compact batch %d (%d of %d bytes); "
                        "going on, the compaction batch finishes it",
                        latest,
                        self.log.uri(),
                        timeout,
                        target,
                        self._copy_done,
                        self._copy_total,
                    )
                    break
                self._progress.wait(left)
        return time.monotonic() - began

    def stop(self) -> None:
        """Give up the copy under way at its next slice, and start none (the writer is closing
        or reopening and waits for its background work: the work file would only be discarded,
        so finishing the copy - 50 MB at 250k live files - is time lost). ``discard_all`` lets
        preparations run again."""
        self._stopping.set()
        self._hurry.set()

    def publish(self, compact_id: int, own_tail: bytes, *, context: str) -> bool | None:
        """Publish the work file as compact file ``compact_id``; None: build it from the logs."""
        log, storage = self.log, self.log.storage
        uploads = self._uploads()
        if uploads is not None:
            with self._lock:  # an upload being begun (its server-side copy) ends first
                upload, self._upload = self._upload, None
                if upload is None or upload.compact_id != compact_id:
                    if upload is not None:
                        uploads.abort_composed(upload.pending)
                    return None
                return self._publish_upload(uploads, upload, own_tail, context=context)
        behind = self._copying and self.holds(compact_id)
        self._hurry.set()  # a copy under way for this batch finishes at full speed
        with self._lock:
            self._hurry.clear()
            if behind:  # prepare fewer of the next ones (module docstring, "Back-off")
                self._backoff = min(MAX_BACKOFF, max(1, 2 * self._backoff))
                self._skip = self._backoff
            elif self.holds(compact_id):
                self._backoff = 0
            work = self._work
            store = self._store()
            if work is None or work.compact_id != compact_id or store is None:
                return None
            self._work = None
            try:
                with store.open_prepared(work.path, append=True) as fh:
                    for batch_id in valid_batches_before_compaction(compact_id, log.interval):
                        if batch_id not in work.included:
                            body = log.raw_body(batch_id, context=context)
                            fh.write(body)
                            work.size += len(body)
                    fh.write(own_tail)
                    work.size += len(own_tail)
                if storage.info(work.path).size != work.size:
                    storage.delete(work.path)
                    return None  # someone else wrote to it: do not trust a byte of it
                store.publish_prepared(work.path, log.path(compact_id))
            except FileNotFoundError:
                return None  # deleted by a writer that took over meanwhile
            except FileExistsError:
                storage.delete(work.path)
                return None  # let the ordinary path compare with what is there
            except BaseException:
                storage.delete(work.path)
                raise
        return True

    def discard(self) -> None:
        """Remove this writer's work file (a clean stop: a successor would only discard it)."""
        with self._lock:
            work, self._work = self._work, None
        if work is not None:
            self.log.storage.delete(work.path)
        self.abort_upload()

    def abort_upload(self) -> None:
        """Abort this object's begun upload, if any - also a fenced writer's at close: its work
        files are left alone, but an upload is aborted by its own id, which no successor shares."""
        with self._lock:
            upload, self._upload = self._upload, None
        uploads = self._uploads()
        if upload is not None and uploads is not None:
            uploads.abort_composed(upload.pending)

    def discard_all(self) -> None:
        """Remove every work file in the log's directory (a crashed writer's take space)."""
        self.abort_upload()  # this object's own; a crashed writer's uploads are invisible
        self._work = None
        self._hurry.clear()
        self._stopping.clear()
        for entry in self.log.storage.list_dir(self.log.directory):
            if entry.name.startswith(".") and entry.name.endswith(PREP_SUFFIX):
                self.log.storage.delete(entry.path)


def preparation_of(log_: CompactibleLog[Any]) -> CompactionPreparation:
    """The preparation of ``log_``'s next compact files, attached to it on first use: the log's
    ``add`` then publishes the prepared file (``CompactibleLog.preparation``)."""
    found = log_.preparation
    if isinstance(found, CompactionPreparation):
        return found
    prepared = CompactionPreparation(log_)
    log_.preparation = prepared
    return prepared
