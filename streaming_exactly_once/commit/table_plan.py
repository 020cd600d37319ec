"""One table's part of a batch, planned before the claim: the same for a table of its own
(``commit.committer``) and for each table of a dataset group (``commit.groups``).

A table batch publishes its staged files (moved into the table in rename mode), the rewrites of
a compaction batch, its schema record when the batch creates or changes the schema, and one
commit per table format the table has - each format checked before anything is claimed, so a
batch the format would refuse fails while nothing is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..delta.files import DeltaFile
from ..delta.target import DeltaTarget
from ..iceberg.files import IcebergFile, staged_rows
from ..iceberg.target import IcebergTarget
from ..manifest.entry import ManifestEntry
from ..storage.base import Storage
from ..storage.io_threads import map_waiting
from ..table.schema_log import SchemaRecord
from .adoption import Adoption, check_for_iceberg
from .protocol.attempt import BatchAttempt, StagedFile, elapsed_ms
from .protocol.steps import FileMove
from .rewrites.table_rewrites import BatchRewrites
from .table_steps.format_step import CommitDelta, CommitIceberg

#: A table format's commit step of one table batch.
FormatStep = CommitDelta | CommitIceberg


@dataclass(frozen=True)
class TableFormats:
    """The table formats a table is published to beside its manifest (None: not that format)."""

    delta: DeltaTarget | None = None
    iceberg: IcebergTarget | None = None


@dataclass(kw_only=True)
class TableBatchAsk:
    """What one table's batch is made of, as its writer hands it over."""

    storage: Storage  # the table's
    attempt: BatchAttempt
    batch_id: int  # the table's batch (a group's table numbers its own)
    files: Sequence[StagedFile]
    schema: str | None  # the batch's Spark schema JSON
    new_schema: SchemaRecord | None  # the record the batch writes, if it creates or changes the schema
    partition_by: tuple[str, ...]
    formats: TableFormats
    #: the compaction rewrites the batch publishes, asked for once its formats took the batch
    rewrites: Callable[[], BatchRewrites]
    #: the table's path under a dataset group's root (None: a table of its own)
    table: str | None = None
    moved: bool = True  # rename mode: the staged files are moved into the table
    #: the batch id is one of the manifest's compaction batches (a ``.compact`` file)
    compaction: bool = False
    adoption: Adoption | None = None  # the existing files a first batch adopts
    #: a first batch of an existing Delta or Iceberg table: that table's files, for the manifest
    format_entries: Callable[[], list[ManifestEntry]] | None = None
    #: where check times go (``deltaCheck``, ``icebergCheck``; None: not recorded)
    timings: dict[str, float] | None = None
    #: the Iceberg commit counts each file's rows before the claim, refusing a file it could not
    #: name while nothing is written (a table of its own; a group's table counts them in the step)
    count_rows: bool = False


@dataclass
class TableBatchPlan:
    """What one table's batch writes: its manifest entries, moves, schema record and format steps."""

    batch_id: int
    entries: list[ManifestEntry]
    moves: list[FileMove]
    rewrites: BatchRewrites
    new_schema: SchemaRecord | None
    format_steps: list[FormatStep] = field(default_factory=list)

    def published(self) -> dict[str, bool]:
        """Which table formats the batch commits to (``delta``, ``iceberg``)."""
        kinds = {s.kind for s in self.format_steps}
        return {"delta": "delta" in kinds, "iceberg": "iceberg" in kinds}


def plan_table_batch(ask: TableBatchAsk) -> TableBatchPlan:
    """The plan of one table's batch; raises (before any claim) if a format refuses it."""
    storage = ask.storage
    steps = format_steps(ask)
    entries = [ManifestEntry.for_file(storage.uri(f.final), size=f.size, modification_time=f.mtime_ms) for f in ask.files]
    if ask.adoption is not None:  # in the same claim as the batch's own files
        entries = ask.adoption.entries(storage) + entries
    elif ask.batch_id == 0 and steps and ask.format_entries is not None:
        entries = ask.format_entries() + entries
    rewrites = ask.rewrites()
    prefix = "" if ask.table is None else f"{ask.table}/"
    moves = [FileMove(f.staged or "", prefix + f.final, f.size) for f in ask.files] if ask.moved else []
    if rewrites:
        moves += rewrites.moves()
        entries += rewrites.entries(storage)
        steps = [replace(s, rewrites=rewrites.rewrites) for s in steps]
    elif not ask.files and not ask.compaction and ask.adoption is None:
        # a batch of no file (``seo compact``'s, a query's first batch or offset reset that wrote
        # no row): no Delta or Iceberg commit (``manifest.empty_batches``) - except at a compaction
        # batch id, whose ``.compact`` file cannot tell it holds nothing new: a commit of no file;
        # an adoption batch commits the files it adopts
        steps = []
    return TableBatchPlan(ask.batch_id, entries, moves, rewrites, ask.new_schema, steps)


def format_steps(ask: TableBatchAsk) -> list[FormatStep]:
    """The batch's commit to each of the table's formats, Delta's first: a crash between them
    rolls both forward. Each format checks (before any claim) that its table takes the batch."""
    steps: list[FormatStep] = []
    if ask.formats.delta is not None:
        steps.append(_delta_step(ask, ask.formats.delta))
    if ask.formats.iceberg is not None:
        steps.append(_iceberg_step(ask, ask.formats.iceberg))
    return steps


def _table_schema(ask: TableBatchAsk) -> str | None:
    return ask.new_schema.schema if ask.new_schema is not None else None


def _delta_step(ask: TableBatchAsk, target: DeltaTarget) -> CommitDelta:
    t0 = time.perf_counter()
    target.check_batch(ask.schema, ask.partition_by, table_schema=_table_schema(ask))
    if ask.timings is not None:
        ask.timings["deltaCheck"] = elapsed_ms(t0)
    adopted = ask.adoption.delta_files() if ask.adoption is not None else []
    return CommitDelta(
        batch_id=ask.batch_id,
        app_id=target.app_id,
        files=adopted + [DeltaFile(f.final, f.size, f.mtime_ms) for f in ask.files],
        partition_by=ask.partition_by,
        schema=ask.schema,
        table_schema=_table_schema(ask),
        table=ask.table,
        settings=target.settings,
        info=ask.attempt.format_info(group=ask.table is not None),
    )


def _iceberg_step(ask: TableBatchAsk, target: IcebergTarget) -> CommitIceberg:
    """Checked before the claim: the table takes the batch and (``count_rows``) every data file is
    one Iceberg can name (``iceberg.files.staged_rows``: its footer, whose row count the step
    then uses)."""
    t0 = time.perf_counter()
    target.check_batch(ask.schema, ask.partition_by, table_schema=_table_schema(ask))
    files = [IcebergFile(f.final, f.size, f.mtime_ms) for f in ask.files]
    if ask.count_rows:
        storage = ask.storage
        counted = map_waiting(f"footers-{storage.root_uri}", lambda f: staged_rows(storage, f.staged or f.final, table=target.name), list(ask.files))
        files = [replace(f, rows=rows) for f, rows in zip(files, counted, strict=True)]
        if ask.adoption is not None:
            check_for_iceberg(storage, ask.adoption, table=target.name)
    if ask.timings is not None:
        ask.timings["icebergCheck"] = elapsed_ms(t0)
    return CommitIceberg(
        batch_id=ask.batch_id,
        app_id=target.app_id,
        files=(ask.adoption.iceberg_files() if ask.adoption is not None else []) + files,
        partition_by=ask.partition_by,
        schema=ask.schema,
        table_schema=_table_schema(ask),
        table=ask.table,
        catalog=target.catalog_ref,
        settings=target.settings,
        info=ask.attempt.format_info(group=ask.table is not None),
    )
