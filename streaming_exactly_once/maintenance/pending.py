"""Everything the pending commits of a table or dataset group still need.

A WAL entry ``_seo/wal/M`` is a commit that may still roll forward (``commit.protocol.recovery``). Until
it has, nothing it names may be deleted: its staging directory, and every staging directory a
staged file of its ``move`` step is in (a compaction batch's rewrites are staged in their own,
``commit.rewrites.rewrite_preparation``); the staged files of its ``move`` step and their targets (in the
table already, or about to be, but in no manifest file yet); the data files its
``manifest``/``members`` entries list (``direct`` mode writes them in place).

Paths are kept as the WAL states them: moves relative to the root that owns the WAL (a group's
moves name ``<table>/<file>``), manifest entries as absolute URIs per table (``None`` = the root
itself), for the caller to place with the table's roots. A WAL entry that cannot be read is an
error, never skipped: what it protects would be unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..commit.protocol.steps import CleanupStaging, MoveFiles, PublishManifest, PublishMembers
from ..commit.protocol.wal import CommitSequenceStore
from ..storage.base import Storage
from ..table.layout import staging_dir_holding


@dataclass
class PendingCommits:
    batches: list[int] = field(default_factory=list)
    attempts: dict[int, str] = field(default_factory=dict)  # batch -> the claim's attempt
    files: set[str] = field(default_factory=set)  # relative to the WAL's root
    dirs: set[str] = field(default_factory=set)  # relative to the WAL's root
    entries: dict[str | None, list[tuple[int, str]]] = field(default_factory=dict)  # table -> (batch, URI)
    #: table -> the table's own batch id -> the paths the claim publishes there (a group's claim
    #: names each member's batch; a table's claim its own): what a claim completes
    publishes: dict[str | None, dict[int, set[str]]] = field(default_factory=dict)

    def files_under(self, table: str | None) -> set[str]:
        """The move paths inside ``table`` (None: the root), relative to it."""
        if table is None:
            return set(self.files)
        prefix = table.rstrip("/") + "/"
        return {f[len(prefix) :] for f in self.files if f.startswith(prefix)}

    def dir_named(self, path: str) -> bool:
        return path.rstrip("/") in self.dirs


def pending_commits(storage: Storage) -> PendingCommits:
    """What every WAL entry of the root at ``storage`` names (see the module docstring)."""
    wal = CommitSequenceStore(storage)
    out = PendingCommits()
    for batch_id in wal.pending():
        seq = wal.get(batch_id)  # LogCorruptError if unreadable: nothing is guessed
        if seq is None:  # completed since the listing
            continue
        out.batches.append(batch_id)
        out.attempts[batch_id] = seq.attempt
        out.dirs.add(seq.staging_dir.rstrip("/"))
        for step in seq.steps:
            if isinstance(step, MoveFiles):
                for move in step.moves:
                    out.files.update((move.src, move.dst))
                    if (holder := staging_dir_holding(move.src)) is not None:
                        out.dirs.add(holder)
            elif isinstance(step, PublishManifest):
                out.entries.setdefault(None, []).extend((batch_id, e.path) for e in step.entries)
                out.publishes.setdefault(None, {})[batch_id] = {e.path for e in step.entries}
            elif isinstance(step, PublishMembers):
                for member in step.members:
                    out.entries.setdefault(member.table, []).extend((batch_id, e.path) for e in member.entries)
                    out.publishes.setdefault(member.table, {})[member.batch_id] = {e.path for e in member.entries}
            elif isinstance(step, CleanupStaging):
                out.dirs.add(step.path.rstrip("/"))
    return out
