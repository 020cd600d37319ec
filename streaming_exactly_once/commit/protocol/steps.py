"""The concrete commit steps of one batch, in the order a sequence runs them.

======================  =====================================================================
kind                    effect (and how ``verify`` knows it is done)
======================  =====================================================================
``move``                staged data files renamed into the table (each target exists with the
                        staged size); ``rename`` mode, and a compaction batch's rewritten files
``manifest``            ``_spark_metadata/M[.compact]`` written - **the visibility point**
                        (the file exists and holds this batch's entries); a compaction batch
                        that rewrites files leaves the ``replaced`` ones out of its compact
                        file (``commit.rewrites.data_compaction``)
``delta``               ``format="delta"``: one Delta commit with the batch's files and the
                        transaction (app id, M) - Delta readers' visibility point (the log's
                        transaction version is >= M); ``commit.table_steps.format_step``
``offsets``             ``_seo/offsets/M`` written: the query, Spark batch and source offsets of
                        M (the file holds M's record). Written after the manifest: nothing
                        needs it before the batch is visible, and a writer that loses an
                        attempt never has a record of it to clean up
``sources``             ``_seo/sources/M`` written (the file holds these records; a compact
                        file: it exists)
``ledger``              ``_seo/ledger/M`` written (it holds this batch's record): what the batch
                        read, wrote and published, for ``seo audit`` (``commit.table_steps.ledger_step``)
``commit``              ``_seo/commits/M`` written (the file exists)
``members``             dataset group: for each of its tables in the batch, the manifest entry
                        and then the table's commit record (in parallel across tables); each
                        table's manifest file is that table's visibility point
``cleanup``             ``direct`` mode: the attempt's intent files removed (nothing left under
                        them) - after this, recovery can no longer mistake the batch's data
                        files for an aborted attempt's. The rest of the staging directory is
                        removed after the WAL entry, off the critical path.
======================  =====================================================================

A fresh commit writes ``offsets`` and ``sources`` without waiting for their sync
(``CommitStep.sync_deferred``); the committer syncs them before it deletes the WAL claim, so
until then a power cut can cut them short, and the roll-forward the claim gets rewrites them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field as dc_field, replace
from functools import partial
from typing import Any

from ...errors import CommitError, LogConflictError, LogCorruptError
from ...log.codec import RecordError, non_negative, path_value
from ...log.compaction import is_compaction_batch
from ...log.record_fields import json_field, strings
from ...manifest.entry import ManifestEntry
from ...storage.base import Storage, check_relative
from ...table.commits_log import CommitRecord
from ...table.offsets_log import OffsetsRecord
from ...table.sources_log import SourceFileRecord
from ...table.table_logs import TableLogs
from .step import CommitStep, MoveContext, StepContext, register

#: Below this many files a thread pool costs more than it saves (local renames take ~50 us).
PARALLEL_MOVES_FROM = 32


@dataclass(frozen=True)
class FileMove:
    src: str
    dst: str
    size: int


def _moves_json(moves: list[FileMove]) -> list[list[Any]]:
    return [[m.src, m.dst, m.size] for m in moves]


def _moves(items: list[Any]) -> list[FileMove]:
    moves = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], str) and isinstance(item[2], int)):
            raise RecordError("field 'moves' must hold [src, dst, size] triples")
        src, dst = (_relative_path(path_value(p, "moves")) for p in item[:2])
        moves.append(FileMove(src, dst, non_negative(item[2], "moves")))
    return moves


@register
@dataclass
class MoveFiles(CommitStep):
    """Rename staged files into their final place (in parallel)."""

    kind = "move"
    #: on disk ``[[src, dst, size], ...]``: a triple per file, as a WAL entry may hold thousands
    moves: list[FileMove] = dc_field(default_factory=list, metadata=json_field("moves", list, encode=_moves_json, decode=_moves))

    def _done(self, ctx: MoveContext, move: FileMove) -> bool:
        try:
            info = ctx.storage.info(move.dst)
        except FileNotFoundError:
            return False
        if info.size != move.size:
            raise CommitError(
                f"Commit step 'move': {ctx.storage.uri(move.dst)} exists with {info.size} bytes, expected "
                f"{move.size}: a different file is in the way. Nothing was overwritten; move it aside "
                "and run `seo recover`.",
                path=move.dst,
            )
        return True

    def verify(self, ctx: StepContext) -> bool:
        return all(self._done(ctx, m) for m in self.moves)

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        return [(ctx.storage, m.dst) for m in self.moves]

    def _move_one(self, ctx: MoveContext, move: FileMove) -> None:
        try:
            ctx.storage.rename(move.src, move.dst)
        except FileExistsError:
            self._done(ctx, move)  # a concurrent roll-forward got there first; check it is ours
        except FileNotFoundError:
            if not self._done(ctx, move):
                raise CommitError(
                    f"Commit step 'move': staged file {ctx.storage.uri(move.src)} is gone and its target "
                    f"{ctx.storage.uri(move.dst)} does not exist. The data was deleted by hand or by another "
                    "tool (e.g. a Delta VACUUM that ran while this batch waited for its Delta commit, which "
                    "happens at the sink's next start); this batch cannot be completed. Restore the staged file, or run "
                    "`seo recover --discard-wal` to drop the batch (Spark will not re-run it).",
                    path=move.src,
                ) from None

    def execute(self, ctx: StepContext) -> None:
        contents = not ctx.staged_data_durable
        if ctx.distribute is not None and len(self.moves) >= ctx.distribute_from:
            # Very large batches: the workers rename, in parallel across the cluster, each
            # checking and syncing its own files (nothing is listed on the driver).
            ctx.distribute(partial(_move_on_worker, contents=contents), self.moves)
            return
        self._move_all(ctx)
        # The manifest entry must not become durable before the files it names (a power cut
        # would leave it pointing at empty or missing files). A fresh commit synced the staged
        # bytes before its claim, so only the new names are left; a roll-forward syncs both.
        ctx.storage.sync([m.dst for m in self.moves], contents=contents)

    def _move_all(self, ctx: MoveContext) -> None:
        if ctx.storage.rename_is_atomic:
            # A rename that never overwrites answers "moved already?" by itself: FileExistsError
            # or a missing source sends ``_move_one`` to ``_done``, which checks the target is
            # ours. Asking first cost a stat per file on every commit.
            pending = self.moves
        else:
            # A copying rename is asked first: a roll-forward must not copy again what it copied.
            pending = [m for m in self.moves if not self._done(ctx, m)]
        parallel_from = PARALLEL_MOVES_FROM if ctx.storage.rename_is_atomic else 2  # object stores copy
        if len(pending) < parallel_from or ctx.move_threads <= 1:
            for move in pending:
                self._move_one(ctx, move)
            return
        with ThreadPoolExecutor(max_workers=ctx.move_threads, thread_name_prefix="seo-move") as pool:
            list(pool.map(lambda m: self._move_one(ctx, m), pending))


def sync_staged_on_worker(storage: Storage, moves: list[FileMove]) -> None:
    """One worker's share of syncing a batch's staged files before its claim (a Spark task)."""
    storage.sync([m.src for m in moves])


def _move_on_worker(storage: Storage, moves: list[FileMove], *, contents: bool = True) -> None:
    """One worker's share of a ``move`` step (runs in a Spark task; same checks as the driver's)."""
    ctx = MoveContext(storage=storage, move_threads=1)
    step = MoveFiles(moves=moves)
    for move in moves:
        if not step._done(ctx, move):
            step._move_one(ctx, move)
    storage.sync([m.dst for m in moves], contents=contents)


@register
@dataclass
class PublishManifest(CommitStep):
    """Write the manifest entry of batch M: after this, every reader sees the batch."""

    kind = "manifest"
    batch_id: int = dc_field(default=0, metadata=json_field("batchId", int))
    entries: list[ManifestEntry] = dc_field(default_factory=list, metadata=json_field("entries", list, record=ManifestEntry))
    #: a compaction batch that also publishes rewrites (``commit.rewrites.data_compaction``): the paths,
    #: as the manifest spells them, of the earlier entries its compact file leaves out
    replaced: tuple[str, ...] = dc_field(default=(), metadata=json_field("replaced", list, optional=True, omit_default=True, check=strings))

    @property
    def replaces_files(self) -> bool:
        return bool(self.replaced)

    def verify(self, ctx: StepContext) -> bool:
        manifest = ctx.logs.require_manifest()
        records = manifest.get(self.batch_id)
        if records is None:
            return False
        present = {e.path for e in records}
        missing = [e.path for e in self.entries if e.path not in present]
        if missing:
            raise LogConflictError(
                path=manifest.uri(self.batch_id),
                batch_id=self.batch_id,
                hint="Another writer published this manifest batch with other files. Stop every other writer of this table and run `seo verify`.",
            )
        return True

    def execute(self, ctx: StepContext) -> None:
        replaced = frozenset(self.replaced)
        drop = (lambda entry: entry.path in replaced) if replaced else None
        ctx.logs.require_manifest().add(self.batch_id, self.entries, drop=drop)

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        manifest = ctx.logs.require_manifest()
        return [(manifest.storage, manifest.path(self.batch_id))]


@register
@dataclass
class WriteSources(CommitStep):
    """Record the batch's input files (what makes a recreated checkpoint safe)."""

    kind = "sources"
    bookkeeping = True
    sync_deferred = True
    batch_id: int = dc_field(default=0, metadata=json_field("batchId", int))
    files: list[SourceFileRecord] = dc_field(default_factory=list, metadata=json_field("files", list, record=SourceFileRecord))

    def verify(self, ctx: StepContext) -> bool:
        sources = ctx.logs.require_sources()
        if is_compaction_batch(self.batch_id, sources.interval):
            # written with its sync, and its bytes depend on the retention clock
            return sources.storage.exists(sources.path(self.batch_id))
        try:
            return sources.get(self.batch_id) == self.files
        except LogCorruptError:
            return False  # torn by a power cut before its sync: ``execute`` rewrites it

    def execute(self, ctx: StepContext) -> None:
        sources = ctx.logs.require_sources()
        try:
            sources.add(self.batch_id, self.files, durable=not ctx.defer_sync)
        except LogConflictError:
            if not sources.rewrite_torn(self.batch_id, self.files):
                raise

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        sources = ctx.logs.require_sources()
        return [(sources.storage, sources.path(self.batch_id))]

    def rewrite_durably(self, ctx: StepContext) -> None:
        ctx.logs.require_sources().rewrite_durably(self.batch_id, self.files)


@register
@dataclass
class WriteOffsets(CommitStep):
    """Record which (query, Spark batch) and source offsets manifest batch M holds."""

    kind = "offsets"
    bookkeeping = True
    sync_deferred = True
    record: OffsetsRecord = dc_field(metadata=json_field("record", dict, record=OffsetsRecord))

    def _key(self, record: OffsetsRecord | None) -> tuple[str, int] | None:
        return None if record is None else (record.query_id, record.spark_batch_id)

    def _found(self, ctx: StepContext) -> tuple[str, int] | None:
        """The key of the record there; None if none, or torn by a power cut before its sync."""
        try:
            return self._key(ctx.logs.require_offsets().record(self.record.batch_id))
        except LogCorruptError:
            return None

    def verify(self, ctx: StepContext) -> bool:
        return self._found(ctx) == self._key(self.record)

    def execute(self, ctx: StepContext) -> None:
        log_ = ctx.logs.require_offsets()
        for second_try in (False, True):
            try:
                log_.add(self.record.batch_id, [self.record], durable=not ctx.defer_sync)
                return
            except LogConflictError:
                if self._found(ctx) == self._key(self.record):
                    return  # a concurrent roll-forward wrote the same record
                if second_try:
                    raise
                # An intent an older release wrote before staging, for an attempt that never
                # committed, or this record torn by a power cut before its sync: this claim's
                # manifest entry is published, so its record wins.
                log_.storage.delete(log_.path(self.record.batch_id))

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        log_ = ctx.logs.require_offsets()
        return [(log_.storage, log_.path(self.record.batch_id))]

    def rewrite_durably(self, ctx: StepContext) -> None:
        ctx.logs.require_offsets().rewrite_durably(self.record.batch_id, [self.record])


@register
@dataclass
class WriteCommit(CommitStep):
    """Record what the batch committed and for which (query, Spark batch)."""

    kind = "commit"
    bookkeeping = True
    record: CommitRecord = dc_field(metadata=json_field("record", dict, record=CommitRecord))

    def verify(self, ctx: StepContext) -> bool:
        return ctx.logs.commits.storage.exists(ctx.logs.commits.path(self.record.batch_id))

    def execute(self, ctx: StepContext) -> None:
        record = replace(
            self.record,
            step_ms={**self.record.step_ms, **ctx.timings},
            committed_by_epoch=ctx.epoch if ctx.epoch is not None else self.record.epoch,
            delta_version=self.record.delta_version if self.record.delta_version is not None else ctx.notes.get("deltaVersion"),
            iceberg_snapshot=self.record.iceberg_snapshot if self.record.iceberg_snapshot is not None else ctx.notes.get("icebergSnapshot"),
        )
        try:
            ctx.logs.commits.add(record.batch_id, [record])
        except LogConflictError:
            # A concurrent roll-forward wrote it first, with its own timings: same batch is fine.
            existing = ctx.logs.commits.record(record.batch_id)
            same = existing is not None and (existing.query_id, existing.spark_batch_id) == (
                record.query_id,
                record.spark_batch_id,
            )
            if not same:
                raise

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        return [(ctx.logs.commits.storage, ctx.logs.commits.path(self.record.batch_id))]


@dataclass(frozen=True)
class MemberPublish:
    """One table of a dataset group in a group batch: its own next batch id, files and record."""

    #: path of the table under the group root, e.g. "orders" or "_quarantine/rows/orders"
    table: str = dc_field(metadata=json_field("table", str))
    batch_id: int = dc_field(metadata=json_field("batchId", int))
    entries: list[ManifestEntry] = dc_field(metadata=json_field("entries", list, record=ManifestEntry))
    record: CommitRecord = dc_field(metadata=json_field("record", dict, record=CommitRecord))
    #: the table's compaction batch that also publishes rewrites: as ``PublishManifest.replaced``
    replaced: tuple[str, ...] = dc_field(default=(), metadata=json_field("replaced", list, optional=True, omit_default=True, check=strings))


@register
@dataclass
class PublishMembers(CommitStep):
    """Publish a group batch in each of its tables: manifest entry first, then commit record.

    In the WAL (one line; ``replaced``, absent unless the table's batch is a compaction batch that
    publishes rewrites, as ``PublishManifest.replaced``)::

        {"kind":"members","members":[{"table":"orders","batchId":5,"entries":[{"path":"file:///g/orders/p=a/part-0.parquet",...}],
         "record":{...},"replaced":["file:///g/orders/p=a/part-00000-<uuid>.c000.snappy.parquet",...]}]}

    Tables are independent files, so they are published in parallel (``move_threads``). A crash
    half-way leaves some tables published and the WAL entry in place: recovery verifies each
    table and finishes the rest - a group batch is never left half-published after restart.
    """

    kind = "members"
    members: list[MemberPublish] = dc_field(default_factory=list, metadata=json_field("members", list, record=MemberPublish))

    @property
    def replaces_files(self) -> bool:
        return any(m.replaced for m in self.members)

    def _logs(self, ctx: StepContext, table: str) -> TableLogs:
        if ctx.member_logs is None:
            raise CommitError(f"commit step 'members' (table {table!r}) needs a dataset group's writer")
        return ctx.member_logs(table)

    def _member_done(self, ctx: StepContext, m: MemberPublish) -> bool:
        logs = self._logs(ctx, m.table)
        inner = StepContext(storage=logs.storage, logs=logs, epoch=ctx.epoch, timings={})
        return PublishManifest(m.batch_id, m.entries).verify(inner) and WriteCommit(m.record).verify(inner)

    def verify(self, ctx: StepContext) -> bool:
        return all(self._member_done(ctx, m) for m in self.members)

    def _publish(self, ctx: StepContext, m: MemberPublish) -> None:
        logs = self._logs(ctx, m.table)
        inner = StepContext(storage=logs.storage, logs=logs, epoch=ctx.epoch, timings={})
        manifest = PublishManifest(m.batch_id, m.entries, m.replaced)
        if not manifest.verify(inner):
            manifest.execute(inner)
        commit = WriteCommit(m.record)
        if not commit.verify(inner):
            commit.execute(inner)

    def execute(self, ctx: StepContext) -> None:
        if len(self.members) < 4 or ctx.move_threads <= 1:
            for m in self.members:
                self._publish(ctx, m)
            return
        # Each table costs two small durable writes: the threads wait on fsync, not on the CPU,
        # so more of them than for moves. Measured with 200 tables: on a busy machine 8 threads
        # took 536 ms and 32 threads 286 ms; on a quiet one 4 threads (move_threads=1) were as fast
        # as 32 (the disk serialises the fsyncs) - see docs/benchmarks.md.
        with ThreadPoolExecutor(max_workers=ctx.move_threads * 4, thread_name_prefix="seo-members") as pool:
            list(pool.map(lambda m: self._publish(ctx, m), self.members))


@register
@dataclass
class CleanupStaging(CommitStep):
    """Remove the attempt's intent files: the data they name is now committed data."""

    kind = "cleanup"
    path: str = dc_field(default="", metadata=json_field("path", str))

    def verify(self, ctx: StepContext) -> bool:
        return not ctx.storage.list_dir(self.path)

    def execute(self, ctx: StepContext) -> None:
        ctx.storage.delete_tree(self.path)


def _relative_path(path: str) -> str:
    """A path of the table's storage as a WAL entry may name it: relative, no ``..``."""
    try:
        return check_relative(path)
    except ValueError:
        raise RecordError(f"field 'moves' names {path[:60]!r}, which is not a path inside the table") from None
