"""A writer's background work, owned in one place: what a committed batch leaves to do off its
path, and the order it must be done in.

After a batch commits: its WAL claim is deleted (once the records written without their sync are
durable), its staging leftovers after the claim, log retention applied, the manifest indexed at a
compaction batch, the next compaction prepared, small data files rewritten. One rule orders them (``docs/design/recovery.md``):
**a batch's claim goes before retention deletes anything the claim's recovery would look at** -
recovery takes a claim for a published batch only while that batch's manifest file is there. It
holds by structure: ``batch_committed`` registers the claim before it queues the batch's
retention, and every retention pass drops the registered claims first and deletes nothing while
one of them stays. Background work queued before a release or a takeover does nothing once it
runs (``Lease.holds``): everything is left to the next lease holder.

Work runs on the janitor's lanes (``commit.background.janitor``); preparation has a lane of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ...log.compactible_log import CompactibleLog
from ...manifest.manifest_index import warm_up
from ...storage.base import Storage
from ..protocol.attempt import elapsed_ms
from ..protocol.lease import Lease
from ..protocol.sequence import CommitSequence, sync_files
from ..protocol.step import StepContext
from ..protocol.wal import CommitSequenceStore
from .compaction_preparation import CommitGate, preparation_of
from .janitor import PREPARE_LANE, REWRITE_LANE, Janitor

log = logging.getLogger("streaming_exactly_once.commit")

Logs = Iterable[CompactibleLog[Any]]


@dataclass
class ClaimToDrop:
    """A completed batch whose WAL claim is yet to be deleted, with the context its steps ran in:
    the records the commit wrote without their sync are found, synced and, after a failed sync,
    written again from it (``CommitSequence.written``, ``rewrite_deferred``)."""

    seq: CommitSequence
    ctx: StepContext
    #: its deferred records were made durable (only the claim's delete is left)
    durable: bool = False
    #: a sync of them failed: they are written again, never synced again
    sync_failed: bool = False


class Housekeeping:
    def __init__(
        self,
        storage: Storage,
        wal: CommitSequenceStore,
        lease: Lease,
        *,
        min_batches_to_retain: int,
        cleanup_delay_ms: int,
        prepare_compactions: bool,
    ) -> None:
        self.storage = storage
        self.wal = wal
        self.lease = lease
        self.min_batches_to_retain = min_batches_to_retain
        self.cleanup_delay_ms = cleanup_delay_ms
        self.prepare_compactions = prepare_compactions
        self.janitor = Janitor(storage)
        #: closed while a batch commits (``CommitEngine``): compaction copies take the disk between commits
        self.gate = CommitGate()
        self._lock = threading.Lock()
        #: logs whose retention is due, with the batch its window ends at (passes coalesce)
        self._retention_due: dict[int, tuple[CompactibleLog[Any], int]] = {}
        #: completed batches whose claim is not deleted yet
        self._claims: list[ClaimToDrop] = []

    # -- a committed batch -------------------------------------------------------------------

    def batch_committed(
        self,
        seq: CommitSequence,
        ctx: StepContext,
        *,
        retention: Iterable[tuple[CompactibleLog[Any], int]],
        prepare: Callable[[], None],
        indexes: Iterable[tuple[object, Callable[[], None]]] = (),
        leftovers: Iterable[str] = (),
    ) -> None:
        """Queue what batch ``seq`` leaves to do: its claim's drop (registered first: the rule
        above) and then its staging directory's and the ``leftovers``' deletion, the next
        compactions' preparation (``prepare``), the manifest ``indexes`` a compaction batch gets,
        what its steps left to do (``StepContext.background``) and the ``retention`` of the logs
        it wrote."""
        with self._lock:
            self._claims.append(ClaimToDrop(seq, ctx))
        self.janitor.submit(partial(self._drop_claim, seq.staging_dir, *leftovers))
        self.queue_preparation(prepare)
        for key, task in indexes:
            self.janitor.submit_latest(key, task)
        for key, task in ctx.background:
            self.janitor.submit_latest(key, partial(self._if_held, task))
        with self._lock:
            for log_, current in retention:
                due = self._retention_due.get(id(log_))
                if due is None or due[1] < current:
                    self._retention_due[id(log_)] = (log_, current)
        self.janitor.submit_latest("retention", self._run_retention)

    def keep_pace(self, logs: Logs, ctx: StepContext) -> None:
        """Wait until the copies that prepare the next compactions are as far as the batches
        (``CompactionPreparation.keep_pace``): the copy's time is spread over the batches before
        a compaction, not left to it."""
        if self.prepare_compactions:
            t_pace = time.perf_counter()
            for log_ in logs:
                preparation_of(log_).keep_pace()
            ctx.timings["pace"] = elapsed_ms(t_pace)

    def queue_preparation(self, prepare: Callable[[], None]) -> None:
        """One pass of ``prepare`` on the preparation lane (passes queued while one runs coalesce)."""
        if self.prepare_compactions:
            self.janitor.submit_latest("prepare", partial(self._if_held, prepare), lane=PREPARE_LANE)

    def queue_rewrite(self, task: Callable[[], None], *, key: object = "rewrite") -> None:
        """``task`` (a rewrite of small data files, ``commit.rewrites.rewrite_preparation``) on its own
        lane; tasks of one ``key`` (one table) coalesce."""
        self.janitor.submit_latest(key, partial(self._if_held, task), lane=REWRITE_LANE)

    def _if_held(self, task: Callable[[], None]) -> None:
        if self.lease.holds():
            task()

    # -- claims and retention ----------------------------------------------------------------

    def _drop_claim(self, *staging_dirs: str) -> None:
        if self.drop_claims():  # this batch's claim among them; its leftovers only after it
            for path in staging_dirs:
                self.storage.delete_tree(path)

    def drop_claims(self) -> bool:
        """Delete the WAL claims of every batch this writer completed so far; False if one could
        not be deleted (it stays registered, for the next pass)."""
        if not self.lease.holds():
            return False  # a successor's recovery finishes them: every step of each is done
        with self._lock:
            batches, self._claims = self._claims, []
        failed: list[ClaimToDrop] = []
        done = 0
        try:
            try:
                # a record whose sync failed is written again, never synced again: Linux marks
                # the pages of a failed fsync clean, so the next fsync can succeed with the
                # bytes never on disk
                for claim in batches:
                    if claim.sync_failed:
                        claim.seq.rewrite_deferred(claim.ctx)
                # one call for every other batch: their fsyncs overlap
                sync_files([pair for c in batches if not (c.durable or c.sync_failed) for pair in c.seq.written(c.ctx, deferred=True)])
                for claim in batches:
                    claim.durable, claim.sync_failed = True, False  # a claim whose delete fails is not synced again
            except Exception:
                log.exception(
                    "making the bookkeeping records of batches %s durable failed; their claims stay, and the records are "
                    "written again before the next retention pass",
                    [claim.seq.batch_id for claim in batches],
                )
                for claim in batches:
                    claim.sync_failed = not claim.durable
                failed, done = list(batches), len(batches)
            for claim in batches[done:]:
                try:
                    self.wal.delete_completed(claim.seq.batch_id)
                except Exception:
                    log.exception("deleting the WAL claim of completed batch %d failed; retried before the next retention pass", claim.seq.batch_id)
                    failed.append(claim)
                done += 1
        finally:
            # whatever was not deleted stays registered - a BaseException (a cancelled async
            # client, SystemExit) included: losing it would let retention outrun the claim
            left = failed + batches[done:]
            if left:
                with self._lock:
                    self._claims = left + self._claims
        return not failed

    def _run_retention(self) -> None:
        with self._lock:
            due, self._retention_due = list(self._retention_due.values()), {}
        if not self.lease.holds():
            return
        if not self.drop_claims():
            # a claim whose batch's files this pass could delete is still there: keep them due
            with self._lock:
                for log_, current in due:
                    kept = self._retention_due.get(id(log_))
                    if kept is None or kept[1] < current:
                        self._retention_due[id(log_)] = (log_, current)
            return
        for log_, current in due:
            log_.delete_expired(current, min_batches_to_retain=self.min_batches_to_retain, cleanup_delay_ms=self.cleanup_delay_ms)

    # -- a writer's start and stop -----------------------------------------------------------

    def stop_preparations(self, logs: Logs) -> None:
        """Stop the background compaction copies (a close or reopen discards their work files)."""
        for log_ in logs:
            preparation_of(log_).stop()

    def quiesce(self, logs: Logs) -> None:
        """Before a recovery: the background copies stopped and every queued task done."""
        self.stop_preparations(logs)
        self.janitor.drain()

    def adopt(self, logs: Logs, owner: str) -> None:
        """Every work file of ``logs`` discarded; new ones named by this writer's epoch
        (``owner``) and paced by its commits."""
        for log_ in logs:
            preparation = preparation_of(log_)
            preparation.discard_all()
            preparation.owner = owner
            preparation.gate = self.gate

    def drain(self) -> None:
        self.janitor.drain()

    def close(self, logs: Logs) -> None:
        """A writer's stop: background work done; its work files removed if it still holds the
        table, else only its own uploads aborted (the work files may be the successor's by now)."""
        logs = list(logs)
        self.stop_preparations(logs)
        self.janitor.drain()
        held = self.lease.holds()
        for log_ in logs:
            if held:
                preparation_of(log_).discard()
            else:
                preparation_of(log_).abort_upload()  # by its own id: never the successor's


_warm_up_lock = threading.Lock()
_warm_up_thread: threading.Thread | None = None


def warm_up_in_background() -> None:
    """The imports of the first manifest index build (``manifest_index.warm_up``, ~0.45 s), once
    per process while nothing waits. A daemon thread of its own, not the janitor's, whose drain a
    writer's close waits for: a writer that stops need not wait for imports it never uses."""
    global _warm_up_thread
    with _warm_up_lock:
        if _warm_up_thread is None:
            _warm_up_thread = threading.Thread(target=warm_up, name="seo-warm-up", daemon=True)
            _warm_up_thread.start()
