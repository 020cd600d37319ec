"""The ``delta`` commit step: manifest batch M as one Delta commit with the transaction (app id, M).

It runs right after the ``manifest`` step - the manifest entry is Spark's visibility point,
this commit is every Delta reader's - and before the bookkeeping (offsets, sources, commit
record), so that a batch's commit record is written only once every reader can see it. Like
every step it is judged by content:

* ``verify``: the Delta log's application transaction of our app id is at least M (Delta's
  ``txn``: the newest batch committed; it only grows, one batch per Delta version);
* ``execute``: read each file's row count from its Parquet footer (which also proves the file
  is there and complete), then ``DeltaTarget.commit``, which checks the log again right before
  committing and never lets delta-rs retry a commit on its own (see ``delta.target``). So the
  step is idempotent under a retry, a roll-forward after a crash at any instant, and a fenced
  writer finishing the same step next to its successor.

Bytes in the WAL (``commit.protocol.sequence``; one line)::

    {"kind":"delta","batchId":12,"appId":"streaming-exactly-once:5b0c...","partitionBy":["day"],"schema":"{\\"type\\":\\"struct\\",...}","files":[["day=2024-01-01/part-00000-<uuid>.c000.snappy.parquet",903,1795313165250]],"table":"orders","checkpointInterval":10,"logRetentionMs":2592000000,"info":{"queryId":"c578917c-...","sparkBatchId":"40"}}

``files`` are [path relative to the table, size, mtime ms]; ``schema`` is the batch's Spark
schema JSON (the table's schema when the batch creates it; null only for a table that already
exists); ``tableSchema`` (absent unless the batch creates or changes the table's schema,
``commit.table_schema``) the table's schema after the batch, which the Delta commit records in a
``metaData`` action when it differs from the log's; ``table`` is the table's path under a dataset group's root (absent for a single
table); ``checkpointInterval``/``logRetentionMs`` are the table properties a first batch
creates the table with; ``info`` goes into the Delta commit's ``commitInfo``; ``rewrites``
(absent unless a compaction batch rewrites files, ``commit.rewrites.data_compaction.Rewrite``) the files
the commit removes and adds with ``dataChange`` false.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from ...delta.files import DeltaFile
from ...delta.stats import parquet_rows
from ...delta.target import DeltaSettings, DeltaTarget
from ...log.record_fields import flattened, json_field
from ...manifest.empty_batches import empty_between
from ...storage.base import Storage
from ..protocol.step import CommitStep, StepContext, register, table_manifest
from ..rewrites.data_compaction import Rewrite
from .format_step_fields import files_decoder, files_json, inside_field, strings


@register
@dataclass
class CommitDelta(CommitStep):
    """Commit manifest batch ``batch_id`` to the table's Delta log (see the module docstring)."""

    kind = "delta"
    batch_id: int = dc_field(default=0, metadata=json_field("batchId", int))
    app_id: str = dc_field(default="", metadata=json_field("appId", str))
    partition_by: tuple[str, ...] = dc_field(default=(), metadata=json_field("partitionBy", list, check=strings))
    schema: str | None = dc_field(default=None, metadata=json_field("schema", str, optional=True))
    #: the table's schema after this batch, when the batch changes it (columns added): the Delta
    #: commit then carries a ``metaData`` action with it (``delta.evolve``)
    table_schema: str | None = dc_field(default=None, metadata=json_field("tableSchema", str, optional=True, omit_default=True))
    #: on disk ``[[path, size, mtime], ...]``
    files: list[DeltaFile] = dc_field(default_factory=list, metadata=json_field("files", list, encode=files_json, decode=files_decoder(DeltaFile)))
    table: str | None = dc_field(default=None, metadata=json_field("table", str, optional=True, omit_default=True, check=inside_field))
    settings: DeltaSettings = dc_field(default=DeltaSettings(), metadata=flattened(DeltaSettings))
    info: dict[str, str] = dc_field(default_factory=dict, metadata=json_field("info", dict, optional=True, encode=dict, check=strings))
    #: a compaction batch's rewrites (``commit.rewrites.data_compaction``): removed and added in the same
    #: commit, ``dataChange`` false
    rewrites: list[Rewrite] = dc_field(default_factory=list, metadata=json_field("rewrites", list, record=Rewrite, optional=True, omit_default=True))

    @property
    def replaces_files(self) -> bool:
        return bool(self.rewrites)

    def target(self, ctx: StepContext) -> DeltaTarget:
        """The table's Delta log, kept in ``ctx`` across batches (its snapshot only moves forward)."""
        target = ctx.delta_targets.get(self.table)
        if target is None or target.app_id != self.app_id:
            storage = ctx.storage if self.table is None else ctx.storage.child(self.table)
            target = DeltaTarget(storage, self.app_id, self.settings)
            ctx.delta_targets[self.table] = target
        return target

    def verify(self, ctx: StepContext) -> bool:
        applied = self.target(ctx).applied_batch()
        return applied is not None and applied >= self.batch_id

    def execute(self, ctx: StepContext) -> None:
        target = self.target(ctx)
        applied = target.applied_batch()  # one log listing for the check and the commit's first attempt
        if applied is None or applied < self.batch_id:
            storage = target.storage
            files = [DeltaFile(f.path, f.size, f.mtime_ms, parquet_rows(storage, f.path)) for f in self.files]
            version = target.commit(
                self.batch_id,
                files,
                schema_json=self.schema,
                partition_by=self.partition_by,
                metadata=self.info,
                fresh=True,
                table_schema=self.table_schema,
                removed=[DeltaFile(path, size, 0) for r in self.rewrites for path, size in r.replaced],
                rearranged=[DeltaFile(r.final, r.size, r.mtime_ms, r.rows) for r in self.rewrites],
                skipped=lambda done: empty_between(table_manifest(ctx, self.table), done, self.batch_id - 1),
            )
        else:
            version = target.version_committing(self.batch_id)
        if version is not None:
            target.make_durable(version)  # before the commit record: the batch is acknowledged after it
            ctx.notes[_note_key(self.table)] = version
            if target.checkpoint_due(version):
                ctx.background.append((("delta checkpoint", self.table), target.write_checkpoint))

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        target = self.target(ctx)
        version = delta_version_note(ctx, self.table)
        if version is None:
            version = target.version_committing(self.batch_id)
        return [] if version is None else [(target.storage, p) for p in target.commit_files(version) if target.storage.exists(p)]


def _note_key(table: str | None) -> str:
    return "deltaVersion" if table is None else f"deltaVersion:{table}"


def delta_version_note(ctx: StepContext, table: str | None = None) -> int | None:
    """The Delta version the ``delta`` step of ``table`` committed (or found) in this run, if known."""
    return ctx.notes.get(_note_key(table))
