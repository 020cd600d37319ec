"""A commit step: a serialisable unit of work that can tell whether it is already done.

The model is Apache Gobblin's CommitStep: ``verify()`` answers "is the effect of this step
already in storage?" and ``execute()`` produces it. Both must be idempotent and safe to run
concurrently with another process running the same step (a writer that lost its lease may
still be finishing the very sequence its successor is rolling forward), which is why every
step here is built on ``put_if_absent``/no-overwrite ``rename`` and compares what it finds.

Steps are stored in the WAL as one JSON object each, tagged by ``kind``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field as dc_field
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

from ...log.record_fields import decode, encode
from ...manifest.manifest_log import ManifestLog
from ...storage.base import Storage
from ...table.table_logs import TableLogs

if TYPE_CHECKING:
    from ...delta.target import DeltaTarget
    from ...iceberg.target import IcebergTarget

#: Runs ``fn(storage, items)`` over chunks of ``items`` (a batch's file moves) on the cluster's
#: workers (the sink provides it from the SparkContext); used for very large move lists.
Distribute = Callable[[Callable[[Storage, list[Any]], None], list[Any]], None]


@dataclass(kw_only=True)
class MoveContext:
    """What moving staged files needs: all a Spark worker running a share of the moves has."""

    storage: Storage
    move_threads: int = 8
    #: ``Distribute``; None: the driver's threads move.
    distribute: Distribute | None = None
    distribute_from: int = 5_000  # moves from which ``distribute`` is used


@dataclass(kw_only=True)
class StepContext(MoveContext):
    """What a step needs at execution time (nothing of it is persisted)."""

    logs: TableLogs
    timings: dict[str, float] = dc_field(default_factory=dict)  # ms per step, filled while running
    epoch: int | None = None  # epoch of the writer executing the steps (may be a successor)
    #: A dataset group's tables by path under the root (``commit.groups.group_committer``); None for a table.
    member_logs: Callable[[str], TableLogs] | None = None
    #: Delta logs of the table (key None) or of a group's tables (key: path under the root), kept
    #: across batches by the committer so that each commit reads only the log's new versions.
    delta_targets: dict[str | None, DeltaTarget] = dc_field(default_factory=dict)
    #: Iceberg tables of the table (key None) or of a group's tables, kept across batches likewise.
    iceberg_targets: dict[str | None, IcebergTarget] = dc_field(default_factory=dict)
    #: Properties of the Iceberg catalogs that ``iceberg`` steps name, by catalog name: given to
    #: the sink at run time (credentials included), never written to the WAL.
    iceberg_catalogs: dict[str, dict[str, str]] = dc_field(default_factory=dict)
    #: What steps learn while running that a later step records (e.g. ``deltaVersion``).
    notes: dict[str, Any] = dc_field(default_factory=dict)
    #: Work a step leaves to do off the batch's path, by key (e.g. a Delta checkpoint): a fresh
    #: commit's housekeeping runs it in the background (tasks of one key coalesce); a roll-forward
    #: drops it, as the next batch that makes it due brings it back.
    background: list[tuple[object, Callable[[], None]]] = dc_field(default_factory=list)
    #: The committer fsync'd every staged file of this attempt before its WAL claim (a fresh
    #: commit always does): a move only has to make the new names durable. False in a
    #: roll-forward, which syncs the bytes again (a no-op for bytes already on disk).
    staged_data_durable: bool = False
    #: staged files whose bytes the writer synced already (``StagedFile.read``): only their names are
    staged_synced: frozenset[str] = frozenset()
    #: The committer's own threads for work that overlaps (``CommitSequence.run``); None: one
    #: step after the other.
    pool: ThreadPoolExecutor | None = None
    #: A fresh commit writes the records its WAL claim can rebuild (``CommitStep.sync_deferred``)
    #: without waiting for the disk; the committer syncs them before it deletes the claim.
    #: False in a roll-forward: what it writes is durable before the claim goes.
    defer_sync: bool = False
    #: A person's decision (``seo recover --accept-int96``): the ``iceberg`` step of a batch that a
    #: release without the check before the claim published may name its INT96 data files.
    accept_int96: bool = False


def table_manifest(ctx: StepContext, table: str | None) -> ManifestLog:
    """The manifest of the table a step commits: the root's, or a dataset group's table ``table``."""
    logs = ctx.logs if table is None or ctx.member_logs is None else ctx.member_logs(table)
    return logs.require_manifest()


class CommitStep(ABC):
    kind: ClassVar[str]
    #: A bookkeeping step records what the WAL entry already holds, in a log of its own that
    #: no reader consults to decide what is visible. Consecutive bookkeeping steps therefore
    #: run concurrently in a fresh commit (``CommitSequence.run``): each is durable before the
    #: entry is deleted, and their order among themselves is nobody's concern. Only what comes
    #: after the visibility step can be one - the commit record, which readers compare with
    #: the manifest, must not appear before the manifest entry.
    bookkeeping: ClassVar[bool] = False
    #: The step's record may be written without its sync in a fresh commit (``defer_sync``):
    #: no reader decides anything by it, the WAL claim holds it, and a roll-forward repairs
    #: what a power cut left of it (missing, empty, cut short). The commit record is not one:
    #: a batch whose Spark batch is acknowledged must stay known as committed.
    sync_deferred: ClassVar[bool] = False

    @property
    def replaces_files(self) -> bool:
        """Whether the step publishes a compaction's rewrites (fields a release without
        compaction would ignore, publishing the replaced files beside the new one): its WAL
        entry is then written as ``v7`` (``commit.protocol.sequence``)."""
        return False

    @abstractmethod
    def verify(self, ctx: StepContext) -> bool:
        """True if this step's effect is already fully in storage."""

    @abstractmethod
    def execute(self, ctx: StepContext) -> None:
        """Produce the effect; safe to call when it is partly or fully done."""

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        """The files whose bytes and names are the step's effect, each with its storage: a
        roll-forward syncs them before it deletes the claim (a step verified done may have
        been written, but not yet synced, by a writer that then died)."""
        return []

    def rewrite_durably(self, ctx: StepContext) -> None:
        """``sync_deferred`` steps: write the record again, durably, under a new inode. For when
        a sync of it failed, or may have: Linux marks the pages of a failed fsync clean, so a
        later fsync of the same file can succeed with the bytes never on disk."""
        raise NotImplementedError(self.kind)

    def to_json(self) -> dict[str, Any]:
        """The step as a JSON object whose first key is ``kind``, then its declared fields
        (``log.record_fields``; a step is a dataclass whose fields carry ``json_field``)."""
        return {"kind": self.kind, **encode(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Self:
        """Inverse of ``to_json`` (raises ``RecordError`` on a bad shape)."""
        return decode(cls, obj)


REGISTRY: dict[str, type[CommitStep]] = {}


S = TypeVar("S", bound=CommitStep)


def register(cls: type[S]) -> type[S]:
    REGISTRY[cls.kind] = cls
    return cls
