"""Rewrites of small files written off the batch's path, waiting for the compaction batch that
publishes them (``commit.rewrites.data_compaction`` plans and writes one; this module says when, where,
and what a compaction batch checks before it claims one).

Why: a rewrite reads and writes up to ``max_bytes`` of data. On the compaction batch's own path
that was the batch's latency (the commit p99 of a compacted table). Here it runs on a lane of its
own (``commit.background.janitor``), between commits (``CommitGate``), and the batch only checks it.

When: planned once the batch before a compaction batch has committed (and at a writer's start),
from the live listing of the latest batch, unless earlier rewrites still wait. The first
compaction batch after they are ready publishes them; a rewrite not ready in time waits for the
next one.

Where: a staging directory of its own, ``_seo/staging/<M>-rw<uid>-e<epoch>/rewrite/<final>``
(``table.layout.staging_dir``; ``M`` the compaction batch it was planned for). To a recovery it
is an attempt that never claimed: an earlier epoch's is judged ``abort`` and deleted, so a
frozen writer's rewrite never publishes after a takeover - it publishes only through a claim,
and a claim needs the lease. The writer's own recovery (after a failed batch) deletes it too, so
a start forgets what was prepared. A claim that moves files out of it takes it along when it is
rolled forward (before the claim itself goes: ``commit.protocol.recovery``). ``seo gc`` deletes it only when no claim moves a file out
of it (``maintenance.pending``) and nothing in it is younger than ``--older-than``.

What a compaction batch checks before its claim (``usable``): every file a rewrite replaces is
live in the listing the batch starts from and not about to be dropped by ``retention``, and the
new file is still staged. A rewrite that fails this is deleted; the others ride the claim. The
listing is read only when a compaction batch came between the planning and this batch: until
then, batches only add files to the listing (only a compaction batch drops any, and only this
writer, under its lease, commits), so the files live at the planning are live still.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from ...log.compaction import next_compaction_batch
from ...manifest.entry import ManifestEntry
from ...storage.base import Storage
from ...table.identity import read_identity
from ...table.layout import staging_dir
from ..background.compaction_preparation import CommitGate
from ..protocol.lease import Lease
from .compaction_consumers import consumer_filter
from .data_compaction import CompactionPolicy, PlanNotes, StagedRewrite, plan, write

log = logging.getLogger("streaming_exactly_once.compaction")

#: How long a rewrite waits for a commit in progress before it writes anyway (never starved).
GATE_WAIT_S = 0.5


class RewritePreparation:
    """One writer's prepared rewrites (module docstring). ``prepare`` runs on the rewrite lane;
    ``usable``, ``published`` and ``forget`` on the committing thread."""

    def __init__(self, storage: Storage, lease: Lease, policy: CompactionPolicy, gate: CommitGate, *, staging: Storage | None = None) -> None:
        self.storage = storage
        #: where the rewrites are staged: the table's storage, or a dataset group's root (whose
        #: recovery judges the staging directories of every table of the group)
        self.staging = staging or storage
        self.lease = lease
        self.policy = policy
        self.gate = gate
        self._lock = threading.Lock()
        self._ready: list[StagedRewrite] = []
        #: the staging directory of ``_ready``, and the batch whose listing they were planned from
        self._dir: str | None = None
        self._planned_from = -1
        self._stopping = threading.Event()
        #: milliseconds the last preparation took (``stepMs.rewrite`` of the batch that publishes it)
        self.last_ms: float | None = None
        #: what the last planning passed over, and why (``seo compact`` says it)
        self.notes: PlanNotes | None = None
        #: files ``write`` would not merge with their neighbours, by manifest path, with why: left
        #: out of this writer's later plans (one such file must not stall its partition)
        self.left_out: dict[str, str] = {}

    def prepare(self, target: int, planned_from: int, live: Callable[[int], Sequence[ManifestEntry]], *, staging_batch: int | None = None) -> None:
        """Plan and write the rewrites compaction batch ``target`` is to publish, from the live
        listing of batch ``planned_from``, ``live(now_ms)`` (the caller leaves out what retention
        is about to drop). ``staging_batch``: the batch id the staging directory is named after,
        when not ``target`` (a dataset group's next batch: its root's directories are named so)."""
        with self._lock:
            if self._ready or self._stopping.is_set():
                return
        if not self.lease.holds():
            return
        t0 = time.perf_counter()
        now = int(time.time() * 1000)
        directory = staging_dir(target if staging_batch is None else staging_batch, f"rw{uuid.uuid4().hex[:8]}", self.lease.epoch or 0)
        out: list[StagedRewrite] = []
        written = False
        try:
            consumers = consumer_filter(self.policy.consumers, self.storage.root_uri)
            identity = read_identity(self.storage)
            notes = self.notes = PlanNotes()
            left_out = self.left_out

            def eligible(entry: ManifestEntry) -> bool:
                return entry.path not in left_out and consumers.allows(entry)

            candidates = plan(
                self.storage, live(now), self.policy, now_ms=now, eligible=eligible, roots=identity.root_uris if identity else (), notes=notes
            )
            for n, candidate in enumerate(candidates):
                if self._stopping.is_set():
                    break
                self.gate.wait_open(GATE_WAIT_S)
                self.lease.check_fence("compact")  # a frozen writer stops before it writes any more
                written = True
                staged = write(
                    self.storage,
                    candidate,
                    staging_dir=directory,
                    batch_id=target,
                    n=n,
                    min_files=self.policy.min_files,
                    staging=self.staging,
                    left_out=self._leave_out,
                )
                if staged is not None:
                    out.append(staged)
        finally:
            if out:
                with self._lock:
                    self._ready, self._dir, self._planned_from = out, directory, planned_from
                self.last_ms = (time.perf_counter() - t0) * 1000
                log.info("compaction prepared %d rewrite(s) for batch %d in %.0f ms", len(out), target, self.last_ms)
            elif written and self.lease.holds():  # what a failed write may have left
                self.staging.delete_tree(directory)

    def _leave_out(self, entry: ManifestEntry, why: str) -> None:
        """``write`` will not merge ``entry``'s file with its neighbours: logged once, and left out
        of this writer's later plans."""
        if entry.path not in self.left_out:
            log.warning("compaction leaves %s alone from now on: %s", entry.uri, why)
        self.left_out[entry.path] = why

    @property
    def ready(self) -> list[StagedRewrite]:
        """The rewrites prepared and not yet published."""
        with self._lock:
            return list(self._ready)

    def usable(
        self, batch_id: int, interval: int, *, listing: Callable[[], Sequence[ManifestEntry]], kept: Callable[[ManifestEntry], bool]
    ) -> list[StagedRewrite]:
        """The prepared rewrites compaction batch ``batch_id`` may publish (module docstring):
        each replaced file live in ``listing()`` (read only if a compaction batch came between)
        and ``kept`` (not about to be dropped by retention); the others are deleted. They stay
        prepared until ``published``: an attempt that fails before its claim leaves them to the next."""
        with self._lock:
            ready, directory, planned_from = list(self._ready), self._dir, self._planned_from
        if next_compaction_batch(planned_from, interval) == batch_id:
            live = None  # no batch since the planning dropped a file
        else:
            live = {entry.path for entry in listing()}
        kept_rewrites = [
            r for r in ready if all(kept(e) and (live is None or e.path in live) for e in r.replaced_entries) and self.staging.exists(r.staged)
        ]
        dropped = [r for r in ready if r not in kept_rewrites]
        for r in dropped:
            log.info("compaction drops its rewrite %s: a file it replaces is no longer live, or it is no longer staged", r.rewrite.final)
            if self.staging.exists(r.staged):
                self.staging.delete(r.staged)
        with self._lock:
            self._ready = [r for r in self._ready if r not in dropped]
            empty = dropped and not self._ready and self._dir == directory
            if empty:
                self._dir = None
        if empty and directory is not None:
            self.staging.delete_tree(directory)
        return kept_rewrites

    def published(self) -> str | None:
        """The rewrites ``usable`` gave were published (their batch committed): forgotten. Returns
        their staging directory, to delete once the batch's claim is gone."""
        with self._lock:
            directory, self._ready, self._dir = self._dir, [], None
        return directory

    def forget(self) -> None:
        """Before a recovery, which deletes the staging directory (its verdict on an unclaimed attempt)."""
        with self._lock:
            self._ready, self._dir = [], None
        self._stopping.clear()

    def stop(self) -> None:
        """A writer's stop: a preparation in progress writes no further file."""
        self._stopping.set()

    def discard(self) -> None:
        """A stopping writer that still holds the table deletes what it prepared."""
        with self._lock:
            directory, self._ready, self._dir = self._dir, [], None
        if directory is not None:
            self.staging.delete_tree(directory)
