"""The ``iceberg`` commit step: manifest batch M as one Iceberg snapshot carrying (app id, M).

It runs right after the ``manifest`` step (or the ``delta`` step) - the manifest entry is
Spark's visibility point, this snapshot every Iceberg reader's - and before the bookkeeping
(offsets, sources, commit record), so that a batch's commit record is written only once every
reader can see it. Like every step it is judged by content:

* ``verify``: the table's high-water mark (the property ``seo.batch-id.<app id>``, set by the
  same commit as the snapshot) is at least M - read from the current metadata file alone, so
  it holds after snapshot expiry - and, for the path-based default, ``version-hint.text`` names
  the current version (else path-based readers would not see the batch: a writer died between
  the metadata file and the hint, and ``execute`` points it right);
* ``execute``: each file's row count - read from its Parquet footer before the WAL claim, where
  a file the commit could not name (incomplete, INT96 timestamps) is refused while nothing is
  written (``iceberg.files.staged_rows``); a roll-forward reads it again, which also proves the
  file is there and complete (``parquet_rows``) - then ``IcebergTarget.commit``, which checks the table again right
  before committing, commits at the version after the one it read and never rebases a lost
  commit onto the winner (see ``iceberg.target``). So the step is idempotent under a retry,
  a roll-forward after a crash at any instant, and a fenced writer finishing the same step next
  to its successor. The files the commit wrote are durable before the step returns.

Bytes in the WAL (``commit.protocol.sequence``; one line; ``docs/design/iceberg-format.md`` has the rest)::

    {"kind":"iceberg","batchId":12,"appId":"streaming-exactly-once:5b0c...","partitionBy":["day"],"schema":"{\\"type\\":\\"struct\\",...}","tableSchema":"{...}","files":[["day=2024-01-01/part-00000-<uuid>.c000.snappy.parquet",903,1795313165250]],"table":"orders","catalog":{"name":"prod","identifier":"db.orders"},"minCountToMerge":100,"previousVersions":100,"info":{"queryId":"c578917c-...","sparkBatchId":"40"}}

``files`` are [path relative to the table, size, mtime ms]; ``schema`` is the batch's Spark
schema JSON (the table's schema when the batch creates it; null only for a table that already
exists); ``tableSchema`` (absent unless the batch creates or changes the table's schema,
``commit.table_schema``) the table's Spark schema after the batch: columns the Iceberg table
lacks are added (optional) by the same commit as the snapshot; ``table`` is the table's path under a dataset group's root (absent for a single
table); ``catalog`` names the pyiceberg catalog and the table in it (absent: the table's own
metadata files, found by path) - its properties, credentials included, are resolved at run
time (``StepContext.iceberg_catalogs``, else pyiceberg's configuration) and never written
here; ``minCountToMerge``/``previousVersions`` are the table properties a first batch creates
the table with; ``snapshotsToKeep`` (absent: no expiry) how many newest snapshots the commit keeps,
expiring the older ones in the same metadata version; ``info`` goes into the snapshot's summary as ``seo.<key>``;
``rewrites`` (absent unless a compaction batch rewrites files, ``commit.rewrites.data_compaction.Rewrite``)
the files a ``replace`` snapshot, committed after the batch's append in the same metadata
version, removes and adds (both snapshots carry the batch's ``seo.batch-id``).
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from ...iceberg.files import IcebergFile, parquet_rows
from ...iceberg.settings import IcebergCatalogRef, IcebergSettings
from ...iceberg.target import IcebergTarget
from ...log.record_fields import flattened, json_field
from ...manifest.empty_batches import empty_between
from ...storage.base import Storage
from ..protocol.step import CommitStep, StepContext, register, table_manifest
from ..rewrites.data_compaction import Rewrite
from .format_step_fields import files_decoder, files_json, inside_field, strings


@register
@dataclass
class CommitIceberg(CommitStep):
    """Commit manifest batch ``batch_id`` to the table's Iceberg metadata (see the module docstring)."""

    kind = "iceberg"
    batch_id: int = dc_field(default=0, metadata=json_field("batchId", int))
    app_id: str = dc_field(default="", metadata=json_field("appId", str))
    partition_by: tuple[str, ...] = dc_field(default=(), metadata=json_field("partitionBy", list, check=strings))
    schema: str | None = dc_field(default=None, metadata=json_field("schema", str, optional=True))
    #: the table's schema after this batch, when the batch changes it (columns added): the Iceberg
    #: commit adds the columns to the table's schema (``iceberg.target``)
    table_schema: str | None = dc_field(default=None, metadata=json_field("tableSchema", str, optional=True, omit_default=True))
    #: on disk ``[[path, size, mtime], ...]``
    files: list[IcebergFile] = dc_field(
        default_factory=list, metadata=json_field("files", list, encode=files_json, decode=files_decoder(IcebergFile))
    )
    table: str | None = dc_field(default=None, metadata=json_field("table", str, optional=True, omit_default=True, check=inside_field))
    catalog: IcebergCatalogRef = dc_field(
        default=IcebergCatalogRef(),
        metadata=json_field("catalog", dict, optional=True, omit_default=True, record=IcebergCatalogRef),
    )
    settings: IcebergSettings = dc_field(default=IcebergSettings(), metadata=flattened(IcebergSettings))
    info: dict[str, str] = dc_field(default_factory=dict, metadata=json_field("info", dict, optional=True, encode=dict, check=strings))
    #: a compaction batch's rewrites (``commit.rewrites.data_compaction``): a ``replace`` snapshot after
    #: the batch's append, in the same commit
    rewrites: list[Rewrite] = dc_field(default_factory=list, metadata=json_field("rewrites", list, record=Rewrite, optional=True, omit_default=True))

    @property
    def replaces_files(self) -> bool:
        return bool(self.rewrites)

    def target(self, ctx: StepContext) -> IcebergTarget:
        """The table's Iceberg target, kept in ``ctx`` across batches (its catalog stays open)."""
        target = ctx.iceberg_targets.get(self.table)
        if target is None or target.app_id != self.app_id or target.catalog_ref != self.catalog:
            storage = ctx.storage if self.table is None else ctx.storage.child(self.table)
            properties = ctx.iceberg_catalogs.get(self.catalog.name or "", {})
            target = IcebergTarget(storage, self.app_id, self.settings, self.catalog, properties)
            ctx.iceberg_targets[self.table] = target
        return target

    def verify(self, ctx: StepContext) -> bool:
        target = self.target(ctx)
        applied = target.applied_batch()
        return applied is not None and applied >= self.batch_id and target.hint_current()

    def execute(self, ctx: StepContext) -> None:
        target = self.target(ctx)
        applied = target.applied_batch()  # one read of the metadata for the check and the commit's first attempt
        if applied is None or applied < self.batch_id:
            storage = target.storage

            def counted(f: IcebergFile, *, leaving: bool = False) -> IcebergFile:
                """``f`` with its rows (counted before the claim in a fresh commit); a file a
                rewrite removes is in the table already, whatever its timestamps."""
                if f.rows is not None:
                    return f
                return IcebergFile(f.path, f.size, f.mtime_ms, parquet_rows(storage, f.path, accept_int96=leaving or ctx.accept_int96))

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
                skipped=lambda done: empty_between(table_manifest(ctx, self.table), done, self.batch_id - 1),
            )
            target.make_durable()  # before the commit record (the batch is acknowledged after it)
        else:
            target.repair_hint()
            snapshot = target.snapshot_committing(self.batch_id)
            if snapshot is not None:  # committed by a writer that may have died before syncing it
                target.make_durable(target.commit_files(snapshot))
        if snapshot is not None:
            ctx.notes[_note_key(self.table)] = snapshot

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        target = self.target(ctx)
        snapshot = iceberg_snapshot_note(ctx, self.table)
        if snapshot is None:
            snapshot = target.snapshot_committing(self.batch_id)
        return [] if snapshot is None else [(target.storage, p) for p in target.commit_files(snapshot)]


def _note_key(table: str | None) -> str:
    return "icebergSnapshot" if table is None else f"icebergSnapshot:{table}"


def iceberg_snapshot_note(ctx: StepContext, table: str | None = None) -> int | None:
    """The snapshot id the ``iceberg`` step of ``table`` committed (or found) in this run, if known."""
    return ctx.notes.get(_note_key(table))
