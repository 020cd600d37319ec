"""The part of a commit a table and a dataset group share: sync the staged data, claim the batch
in the WAL, check the fence, run the steps. What the steps are is the caller's business.

Order (``docs/design/commit-protocol.md``): the staged bytes are durable *before* the claim, so
a claim on disk always means its data is on disk; the fence is checked before and right after
the claim, so a writer that claimed after a takeover never runs a step.
"""

from __future__ import annotations

import logging
import time

from ...errors import DataNotDurableError, WriterFencedError
from ...storage.base import Storage
from ..background.compaction_preparation import CommitGate
from .attempt import elapsed_ms
from .lease import Lease, fenced_cause
from .recovery import discard_sequence
from .sequence import CommitSequence
from .step import StepContext
from .steps import FileMove, MoveFiles, sync_staged_on_worker
from .wal import CommitSequenceStore

log = logging.getLogger("streaming_exactly_once.commit")


class CommitEngine:
    def __init__(self, storage: Storage, wal: CommitSequenceStore, lease: Lease, gate: CommitGate, *, step_retries: int) -> None:
        self.storage = storage
        self.wal = wal
        self.lease = lease
        #: closed while a batch commits: background compaction copies take the disk between commits
        self.gate = gate
        self.step_retries = step_retries

    def run(self, seq: CommitSequence, ctx: StepContext) -> None:
        """Claim ``seq``'s batch and bring every step to done (``ctx.timings`` gets each part)."""
        self.lease.check_fence("publish")
        with self.gate.committing():
            t_sync = time.perf_counter()
            self._sync_staged(seq, ctx)
            ctx.timings["syncStaged"] = elapsed_ms(t_sync)
            t_wal = time.perf_counter()
            self.claim(seq)
            ctx.timings["wal"] = elapsed_ms(t_wal)
            self.lease.check_fence("publish")  # a claim made after a takeover stops here
            seq.run(ctx, fresh=True, retries=self.step_retries)

    def _sync_staged(self, seq: CommitSequence, ctx: StepContext) -> None:
        """Make the staged bytes durable before the claim (Spark's writers do not sync).

        Why not overlapping the claim: a sync that fails leaves the pages clean but unwritten,
        and a roll-forward's sync of the same files would then succeed and publish bytes the
        disk never held. A failure here fails the batch before its claim - nothing to undo,
        Spark writes it again. A move list the workers run is synced on the workers."""
        moves = [m for step in seq.steps if isinstance(step, MoveFiles) for m in step.moves]
        if not moves:
            return
        try:
            synced = [m.src for m in moves if m.src in ctx.staged_synced]  # their bytes, by the writer
            if ctx.distribute is not None and len(moves) >= ctx.distribute_from:
                ctx.distribute(sync_staged_on_worker, moves)
            elif len(synced) < len(moves):
                self.storage.sync([m.src for m in moves if m.src not in ctx.staged_synced])
            # Spark's writer made the directories the files are in without syncing them either:
            # their names must be on disk too, or a claim found after a power cut names files
            # that vanished with their directory (syncing a path syncs its parent directory: a
            # synced file's own directory is synced by naming the file)
            self.storage.sync(synced + _directories_below(seq.staging_dir, moves), contents=False)
        except FileNotFoundError as exc:  # a successor aborted this attempt and deleted its files
            fenced = fenced_cause(self.storage, self.lease.epoch, "stage")
            if fenced is not None:
                raise fenced from exc
            raise
        except Exception as exc:
            raise DataNotDurableError(
                f"Syncing the staged data files of batch {seq.batch_id} of {self.storage.root_uri} failed ({str(exc)[:300]}): "
                "the disk may not hold their bytes, and a second sync would not show it. Nothing was published; the "
                "batch fails before its claim, and Spark writes it again.",
                batch_id=seq.batch_id,
            ) from exc
        ctx.staged_data_durable = True

    def claim(self, seq: CommitSequence) -> None:
        """Create ``_seo/wal/M``; a claim left by a writer fenced before ours is replaced."""
        try:
            self.wal.put(seq)
            return
        except FileExistsError:
            pass
        existing = self.wal.get(seq.batch_id)
        if existing is not None and existing.epoch < seq.epoch:
            # Claimed by a writer we had already fenced when it claimed (our recovery listing did
            # not see it): it fails its own fence check and never runs a step. Remove it.
            log.warning("removing WAL claim on batch %d by fenced epoch %d", seq.batch_id, existing.epoch)
            discard_sequence(self.storage, existing)
            self.wal.delete(seq.batch_id, attempt=existing.attempt)
            self.wal.put(seq)
            return
        raise WriterFencedError(
            f"Manifest batch {seq.batch_id} of {self.storage.root_uri} was claimed by writer epoch "
            f"{existing.epoch if existing else '?'} while this writer (epoch {seq.epoch}) held the lease. "
            "Another writer is active; this one stops without publishing.",
            batch_id=seq.batch_id,
        )


def _directories_below(staging_dir: str, moves: list[FileMove]) -> list[str]:
    """Every directory from the attempt's staging directory down to the staged files' own."""
    found: set[str] = {staging_dir}
    for move in moves:
        parent = move.src.rsplit("/", 1)[0]
        while parent.startswith(staging_dir + "/") and parent not in found:
            found.add(parent)
            parent = parent.rsplit("/", 1)[0]
    return sorted(found)
