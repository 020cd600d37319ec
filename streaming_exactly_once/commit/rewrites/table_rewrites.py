"""One table's compaction as its writer drives it: when a rewrite is planned, what a compaction
batch of the table publishes, and what is left to delete after it.

``commit.rewrites.data_compaction`` plans and writes a rewrite, ``commit.rewrites.rewrite_preparation`` prepares it
off the batch's path; this module ties them to a writer's batches. A single table's writer holds
one ``TableRewrites``; a dataset group's writer holds one per table of the group, each staged
under the group's root (``_seo/staging/<G>-rw<uid>-e<epoch>/rewrite/<final>``, ``G`` the group
batch that was next at the planning): the group's recovery and ``seo gc`` judge those directories
like the group's own attempts, and a table's rewrites publish in the group batch that gives the
table its compaction batch - inside the group's claim, under the group's lease.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from functools import partial

from ...log.compaction import is_compaction_batch, next_compaction_batch
from ...manifest.entry import ManifestEntry
from ...manifest.manifest_log import ManifestLog
from ...storage.base import Storage
from ...table.commits_log import RewriteNote
from ..background.housekeeping import Housekeeping
from ..protocol.attempt import elapsed_ms
from ..protocol.steps import FileMove
from .compaction_consumers import consumer_filter
from .data_compaction import CompactionPolicy, Rewrite, StagedRewrite, kept_by_retention, rewritable
from .rewrite_preparation import RewritePreparation


@dataclass(frozen=True)
class BatchRewrites:
    """The rewrites one compaction batch of a table publishes, as its commit steps name them."""

    staged: tuple[StagedRewrite, ...] = ()
    #: the table's path under the staging storage's root ("" for a single table)
    table: str = ""
    #: the preparation they came from, told once the batch has published them
    owner: TableRewrites | None = None

    def __bool__(self) -> bool:
        return bool(self.staged)

    def moves(self) -> list[FileMove]:
        """The new files' moves, paths relative to the staging storage."""
        prefix = f"{self.table}/" if self.table else ""
        return [FileMove(r.staged, prefix + r.rewrite.final, r.rewrite.size) for r in self.staged]

    def entries(self, storage: Storage) -> list[ManifestEntry]:
        """The new files' manifest entries (``storage``: the table's)."""
        return [r.entry(storage) for r in self.staged]

    @property
    def replaced(self) -> tuple[str, ...]:
        """The manifest paths the batch's compact file leaves out."""
        return tuple(p for r in self.staged for p in r.replaced_paths)

    @property
    def rewrites(self) -> list[Rewrite]:
        """For a Delta commit: what it removes and adds with ``dataChange`` false."""
        return [r.rewrite for r in self.staged]

    def notes(self) -> list[RewriteNote]:
        """For the batch's commit record (``seo verify`` checks them)."""
        return [RewriteNote(r.rewrite.final, r.rewrite.rows, tuple(p for p, _ in r.rewrite.replaced)) for r in self.staged]


class TableRewrites:
    """A table's prepared rewrites and the rules for planning and publishing them (module docstring)."""

    def __init__(
        self, storage: Storage, housekeeping: Housekeeping, policy: CompactionPolicy, *, staging: Storage | None = None, table: str = ""
    ) -> None:
        self.table = table
        self.housekeeping = housekeeping
        self.preparation = RewritePreparation(storage, housekeeping.lease, policy, housekeeping.gate, staging=staging)

    def plan(self, manifest: ManifestLog, latest: int, *, start: bool = False, staging_batch: int | None = None) -> None:
        """Queue the rewrites of the next compaction batch on the rewrite lane - once the batch
        before it committed (``latest``), or at a start."""
        target = next_compaction_batch(latest, manifest.interval)
        if not start and target != latest + 1:
            return
        live = partial(rewritable, manifest, latest)
        task = partial(self.preparation.prepare, target, latest, live, staging_batch=staging_batch)
        self.housekeeping.queue_rewrite(task, key=("rewrite", self.table))

    def for_batch(self, manifest: ManifestLog, batch_id: int, timings: MutableMapping[str, float]) -> BatchRewrites:
        """What batch ``batch_id`` publishes: nothing unless it is a compaction batch and rewrites
        are ready; then those still valid (checked before any claim). Notes ``stepMs``."""
        preparation = self.preparation
        if not is_compaction_batch(batch_id, manifest.interval) or not preparation.ready:
            return BatchRewrites(table=self.table)
        t0 = time.perf_counter()
        retained = kept_by_retention(manifest, int(time.time() * 1000))
        # the registered consumers again: one may have been reset since the planning
        consumers = consumer_filter(preparation.policy.consumers, preparation.storage.root_uri)

        def kept(entry: ManifestEntry) -> bool:
            return retained(entry) and consumers.allows(entry)

        out = preparation.usable(batch_id, manifest.interval, listing=partial(manifest.files, as_of=batch_id - 1), kept=kept)
        key = f"compaction:{self.table}" if self.table else "compaction"
        timings[key] = elapsed_ms(t0)
        if out and preparation.last_ms is not None:
            timings[f"rewrite:{self.table}" if self.table else "rewrite"] = round(preparation.last_ms, 3)
        return BatchRewrites(tuple(out), self.table, self)

    def published(self) -> list[str]:
        """After a batch published its rewrites: their staging directory, to delete once its claim is gone."""
        directory = self.preparation.published()
        return [] if directory is None else [directory]

    def forget(self) -> None:
        self.preparation.forget()

    def stop(self) -> None:
        self.preparation.stop()

    def discard(self) -> None:
        self.preparation.discard()


def leftovers_of(batches: Sequence[BatchRewrites]) -> Callable[[], list[str]]:
    """For ``Writer._run``: once the batch committed, the staging directories of the rewrites
    ``batches`` published (their preparations forget them)."""
    return lambda: [directory for batch in batches if batch and batch.owner is not None for directory in batch.owner.published()]
