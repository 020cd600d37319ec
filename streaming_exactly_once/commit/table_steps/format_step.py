"""The format commit step: manifest batch M as one commit to one of the table's formats - a Delta
commit with the transaction (app id, M) (kind ``delta``), an Iceberg snapshot carrying (app id,
M) (kind ``iceberg``).

It runs right after the ``manifest`` step (Delta's before Iceberg's) - the manifest entry is
Spark's visibility point, this commit every reader's of that format - and before the
bookkeeping, so that a batch's commit record is written only once every reader can see it. Like
every step it is judged by content: ``verify`` asks the format's table for its newest batch of
our app id (Delta's ``txn``; Iceberg's ``seo.batch-id.<app id>`` property, plus a current
``version-hint.text`` for a path-based table); ``execute`` counts each file's rows from its
Parquet footer (which proves the file is there and complete), then commits through the format's
target, which checks the table again right before committing and never retries a lost commit
blindly. So the step is idempotent under a retry, a roll-forward after a crash at any instant,
and a fenced writer finishing the same step next to its successor. What it committed is durable
before the step returns (the batch is acknowledged after it).

``CommitFormat`` holds all of this once; ``CommitDelta`` and ``CommitIceberg`` declare only what
differs: their settings (and Iceberg's catalog) and how each target commits. The bytes in the
WAL are those the two kinds always had (one line each; ``docs/design/commit-protocol.md`` and
``docs/design/iceberg-format.md`` show them): the shared fields in the order ``batchId``,
``appId``, ``partitionBy``, ``schema``, ``tableSchema`` (absent unless the batch changes the
table's schema), ``files`` (``[[path relative to the table, size, mtime ms], ...]``), ``table``
(a dataset group's table; absent for a table of its own), then the format's own fields
(Delta: ``checkpointInterval``, ``logRetentionMs``; Iceberg: ``catalog``, ``minCountToMerge``,
``previousVersions``, ``snapshotsToKeep``), then ``info`` and ``rewrites`` (absent unless a
compaction batch rewrites files, ``commit.rewrites.data_compaction.Rewrite``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field as dc_field
from typing import Any, ClassVar

from ...delta.files import DeltaFile
from ...delta.settings import DeltaSettings
from ...delta.stats import parquet_rows as delta_rows
from ...delta.target import DeltaTarget
from ...iceberg.files import IcebergFile, parquet_rows as iceberg_rows
from ...iceberg.settings import IcebergCatalogRef, IcebergSettings
from ...iceberg.target import IcebergTarget
from ...log.record_fields import flattened, json_field
from ...manifest.empty_batches import empty_between
from ...storage.base import Storage
from ..protocol.step import CommitStep, StepContext, register, table_manifest
from ..rewrites.data_compaction import Rewrite
from .format_step_fields import files_decoder, files_json, inside_field, strings

#: A format's table as the step commits to it.
Target = DeltaTarget | IcebergTarget


@dataclass
class CommitFormat(CommitStep):
    """Commit manifest batch ``batch_id`` to one of the table's formats (the module docstring).
    Fields are declared here in their WAL order; a format redeclares ``files``, ``catalog`` and
    ``settings`` (a redeclared field keeps its place)."""

    #: ``ctx.notes`` key of what the commit made (a Delta version, an Iceberg snapshot id)
    note: ClassVar[str]
    batch_id: int = dc_field(default=0, metadata=json_field("batchId", int))
    app_id: str = dc_field(default="", metadata=json_field("appId", str))
    partition_by: tuple[str, ...] = dc_field(default=(), metadata=json_field("partitionBy", list, check=strings))
    schema: str | None = dc_field(default=None, metadata=json_field("schema", str, optional=True))
    #: the table's schema after this batch, when the batch changes it (columns added): the
    #: format's commit records it (``delta.evolve``, ``iceberg.evolve``)
    table_schema: str | None = dc_field(default=None, metadata=json_field("tableSchema", str, optional=True, omit_default=True))
    files: list[Any] = dc_field(default_factory=list)
    table: str | None = dc_field(default=None, metadata=json_field("table", str, optional=True, omit_default=True, check=inside_field))
    catalog: Any = None
    settings: Any = None
    info: dict[str, str] = dc_field(default_factory=dict, metadata=json_field("info", dict, optional=True, encode=dict, check=strings))
    #: a compaction batch's rewrites (``commit.rewrites.data_compaction``): removed and added by the
    #: same commit without changing the data
    rewrites: list[Rewrite] = dc_field(default_factory=list, metadata=json_field("rewrites", list, record=Rewrite, optional=True, omit_default=True))

    @property
    def replaces_files(self) -> bool:
        return bool(self.rewrites)

    def target(self, ctx: StepContext) -> Target:
        """The format's table, kept in ``ctx`` across batches (its snapshot only moves forward)."""
        raise NotImplementedError

    def _skipped(self, ctx: StepContext) -> Callable[[int], bool]:
        """Whether every batch after a given one up to this one's predecessor holds no file."""
        return lambda done: empty_between(table_manifest(ctx, self.table), done, self.batch_id - 1)

    def verify(self, ctx: StepContext) -> bool:
        applied = self.target(ctx).applied_batch()
        return applied is not None and applied >= self.batch_id

    def execute(self, ctx: StepContext) -> None:
        target = self.target(ctx)
        applied = target.applied_batch()  # one read for the check and the commit's first attempt
        made = self._commit(target, ctx) if applied is None or applied < self.batch_id else self._found(target)
        if made is not None:
            ctx.notes[note_key(self.note, self.table)] = made
            self._after(target, ctx, made)

    def _commit(self, target: Any, ctx: StepContext) -> int | None:
        """Commit the batch, durably; the version or snapshot id it made (None: none needed)."""
        raise NotImplementedError

    def _found(self, target: Any) -> int | None:
        """The batch is in the table already (a retry, a roll-forward): what holds it, made durable."""
        raise NotImplementedError

    def _after(self, target: Any, ctx: StepContext, made: int) -> None:
        """What the format leaves to the writer's background work once ``made`` holds the batch."""

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        target = self.target(ctx)
        made = ctx.notes.get(note_key(self.note, self.table))
        if made is None:
            made = self._committing(target)
        return [] if made is None else [(target.storage, p) for p in self._commit_files(target, made)]

    def _committing(self, target: Any) -> int | None:
        raise NotImplementedError

    def _commit_files(self, target: Any, made: int) -> list[str]:
        return list(target.commit_files(made))


def note_key(note: str, table: str | None) -> str:
    return note if table is None else f"{note}:{table}"


@register
@dataclass
class CommitDelta(CommitFormat):
    """A Delta commit with the transaction (app id, M) (kind ``delta``)."""

    kind = "delta"
    note = "deltaVersion"
    files: list[DeltaFile] = dc_field(default_factory=list, metadata=json_field("files", list, encode=files_json, decode=files_decoder(DeltaFile)))
    catalog: None = None
    settings: DeltaSettings = dc_field(default=DeltaSettings(), metadata=flattened(DeltaSettings))

    def target(self, ctx: StepContext) -> DeltaTarget:
        target = ctx.delta_targets.get(self.table)
        if target is None or target.app_id != self.app_id:
            storage = ctx.storage if self.table is None else ctx.storage.child(self.table)
            target = ctx.delta_targets[self.table] = DeltaTarget(storage, self.app_id, self.settings)
        return target

    def _commit(self, target: DeltaTarget, ctx: StepContext) -> int | None:
        storage = target.storage
        version = target.commit(
            self.batch_id,
            [DeltaFile(f.path, f.size, f.mtime_ms, delta_rows(storage, f.path)) for f in self.files],
            schema_json=self.schema,
            partition_by=self.partition_by,
            metadata=self.info,
            fresh=True,
            table_schema=self.table_schema,
            removed=[DeltaFile(path, size, 0) for r in self.rewrites for path, size in r.replaced],
            rearranged=[DeltaFile(r.final, r.size, r.mtime_ms, r.rows) for r in self.rewrites],
            skipped=self._skipped(ctx),
        )
        if version is not None:
            target.make_durable(version)  # before the commit record: the batch is acknowledged after it
        return version

    def _found(self, target: DeltaTarget) -> int | None:
        version = target.version_committing(self.batch_id)
        if version is not None:
            target.make_durable(version)
        return version

    def _after(self, target: DeltaTarget, ctx: StepContext, made: int) -> None:
        if target.checkpoint_due(made):  # written off the batch's path (``delta.target.write_checkpoint``)
            ctx.background.append((("delta checkpoint", self.table), target.write_checkpoint))

    def _committing(self, target: DeltaTarget) -> int | None:
        return target.version_committing(self.batch_id)

    def _commit_files(self, target: DeltaTarget, made: int) -> list[str]:
        return [p for p in target.commit_files(made) if target.storage.exists(p)]


@register
@dataclass
class CommitIceberg(CommitFormat):
    """An Iceberg snapshot carrying (app id, M) (kind ``iceberg``): the table's high-water property
    is set by the same commit. ``catalog`` names the pyiceberg catalog and the table in it (absent:
    the table's own metadata files, found by path); its properties, credentials included, come
    from ``StepContext.iceberg_catalogs`` at run time and are never written to the WAL."""

    kind = "iceberg"
    note = "icebergSnapshot"
    files: list[IcebergFile] = dc_field(
        default_factory=list, metadata=json_field("files", list, encode=files_json, decode=files_decoder(IcebergFile))
    )
    catalog: IcebergCatalogRef = dc_field(
        default=IcebergCatalogRef(),
        metadata=json_field("catalog", dict, optional=True, omit_default=True, record=IcebergCatalogRef),
    )
    settings: IcebergSettings = dc_field(default=IcebergSettings(), metadata=flattened(IcebergSettings))

    def target(self, ctx: StepContext) -> IcebergTarget:
        target = ctx.iceberg_targets.get(self.table)
        if target is None or target.app_id != self.app_id or target.catalog_ref != self.catalog:
            storage = ctx.storage if self.table is None else ctx.storage.child(self.table)
            properties = ctx.iceberg_catalogs.get(self.catalog.name or "", {})
            target = ctx.iceberg_targets[self.table] = IcebergTarget(storage, self.app_id, self.settings, self.catalog, properties)
        return target

    def verify(self, ctx: StepContext) -> bool:
        """Also: a path-based table's ``version-hint.text`` names the current version (else its
        readers would not see the batch; ``execute`` points it right)."""
        return super().verify(ctx) and self.target(ctx).hint_current()

    def _commit(self, target: IcebergTarget, ctx: StepContext) -> int | None:
        storage = target.storage

        def counted(f: IcebergFile, *, leaving: bool = False) -> IcebergFile:
            """``f`` with its rows (counted before the claim in a fresh commit of a table of its
            own); a file a rewrite removes is in the table already, whatever its timestamps."""
            if f.rows is not None:
                return f
            return IcebergFile(f.path, f.size, f.mtime_ms, iceberg_rows(storage, f.path, accept_int96=leaving or ctx.accept_int96))

        snapshot = target.commit(
            self.batch_id,
            [counted(f) for f in self.files],
            schema_json=self.schema,
            table_schema=self.table_schema,
            partition_by=self.partition_by,
            metadata=self.info,
            fresh=True,
            rewrites=[
                ([counted(IcebergFile(p, size, 0), leaving=True) for p, size in r.replaced], IcebergFile(r.final, r.size, r.mtime_ms, r.rows))
                for r in self.rewrites
            ],
            skipped=self._skipped(ctx),
        )
        target.make_durable()  # before the commit record (the batch is acknowledged after it)
        return snapshot

    def _found(self, target: IcebergTarget) -> int | None:
        target.repair_hint()
        snapshot = target.snapshot_committing(self.batch_id)
        if snapshot is not None:  # committed by a writer that may have died before syncing it
            target.make_durable(target.commit_files(snapshot))
        return snapshot

    def _committing(self, target: IcebergTarget) -> int | None:
        return target.snapshot_committing(self.batch_id)


def delta_version_note(ctx: StepContext, table: str | None = None) -> int | None:
    """The Delta version the ``delta`` step of ``table`` committed (or found) in this run, if known."""
    return ctx.notes.get(note_key(CommitDelta.note, table))


def iceberg_snapshot_note(ctx: StepContext, table: str | None = None) -> int | None:
    """The snapshot id the ``iceberg`` step of ``table`` committed (or found) in this run, if known."""
    return ctx.notes.get(note_key(CommitIceberg.note, table))
