"""One all-or-nothing commit per batch across the tables of a dataset group.

A group is a root directory whose tables are subdirectories, each a normal table with its own
manifest (any reader reads one table as it reads a single-sink table)::

    <root>/
      _seo/table                 identity, kind "group"
      _seo/offsets/G  commits/G  sources/G  wal/G  epochs/  heartbeats/  staging/G-<attempt>-e<E>/
      orders/                    a table: _spark_metadata/, _seo/table (kind "member"), _seo/commits/
      payments/
      _quarantine/rows/orders/   rows of "orders" that failed a row check (+ _seo_failed_checks)
      _quarantine/batches/orders/  whole batches of "orders" rejected by a mandatory batch check

``G`` numbers group batches; each table numbers its own batches (a table absent from a group
batch gets no batch). The commit of group batch ``G``::

    WAL _seo/wal/G (create-if-absent: the claim)
      [move]     staged files -> <table>/<k=v>/part-...       (parallel)
      [schema]   per table whose schema the batch creates or changes: <table>/_seo/schema/m
      [members]  per table: _spark_metadata/m, _seo/commits/m (parallel across tables)
      [delta]    per format="delta" table: one Delta commit with (table's app id, m)
      [iceberg]  per format="iceberg" table: one Iceberg snapshot, its high-water property m
      [offsets]  _seo/offsets/G
      [sources]  _seo/sources/G
      [commit]   _seo/commits/G  with the state of every table   <- the group batch is done
    delete WAL

Each table becomes visible at its own manifest write, so for a few milliseconds a reader of two
tables may see one with the batch and one without; but from the WAL write on, every table of
the batch is published or, after a crash, finished by recovery - never some tables only.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...checkpoint.reader import InputFile
from ...delta.target import DeltaSettings, DeltaTarget
from ...errors import DeltaTableError, IcebergTableError, LogCorruptError
from ...iceberg.leftovers import discard_leftovers
from ...iceberg.settings import IcebergCatalogRef, IcebergSettings
from ...iceberg.target import IcebergTarget
from ...log.compactible_log import CompactibleLog
from ...log.compaction import is_compaction_batch
from ...manifest.empty_batches import holds_manifest
from ...storage.base import Storage
from ...table.commits_log import CommitRecord
from ...table.group_state import GroupState, TableBatch, advance, advance_sources, is_quarantine
from ...table.identity import TableIdentity, TableSpec, check_identity, ensure_identity, note_root, read_identity
from ...table.schema_log import SchemaRecord
from ...table.table_logs import TableLogs
from ..background.compaction_preparation import preparation_of
from ..committer import index_compact, vouch_by_index
from ..ledger_enforce import member_ledger, root_ledger
from ..options import CommitterOptions
from ..protocol.attempt import BatchAttempt, CommitResult, sources_step
from ..protocol.recovery import PublishedView, RecoveryReport
from ..protocol.step import CommitStep
from ..protocol.steps import MemberPublish, MoveFiles, PublishMembers, WriteCommit
from ..rewrites.group_rewrites import GroupRewrites
from ..rewrites.table_rewrites import BatchRewrites, leftovers_of
from ..table_plan import TableBatchAsk, TableBatchPlan, TableFormats, plan_table_batch
from ..table_schema import TableSchema, table_format_of
from ..table_steps.ledger_step import WriteLedger
from ..table_steps.schema_step import WriteSchema
from ..writer import Writer
from .group_members import CommitsView, Member, MemberBatch, state_of, table_formats, tables_in

log = logging.getLogger("streaming_exactly_once.commit")


@dataclass
class _MemberPart:
    """One table's part of a group batch: its batch, plan, manifest publish and ledger."""

    mb: MemberBatch
    plan: TableBatchPlan
    publish: MemberPublish
    ledger: WriteLedger


class GroupCommitter(Writer):
    """Commits group batches: every table of a batch, or none, per (query id, Spark batch id)."""

    ADOPTS_FILES = False  # DatasetSink refuses adopt_existing_files: existing files are moved away

    def __init__(self, storage: Storage, options: CommitterOptions) -> None:
        self._members: dict[str, Member] = {}
        self._members_lock = threading.Lock()
        self.state = GroupState()
        self._touched: list[str] = []
        self.rewrites: GroupRewrites | None = None
        #: the tables whose rewrites a start plans (None: every dataset table; ``seo compact``
        #: of one table of the group names it)
        self.compacted_tables: Sequence[str] | None = None
        super().__init__(storage, options)
        compaction = options.compaction
        #: each dataset table's prepared rewrites (``commit.rewrites.group_rewrites``; None: compaction off)
        self.rewrites = (
            None
            if compaction is None
            else GroupRewrites(storage, self.housekeeping, compaction, interval=options.compact_interval, retention_ms=options.retention_ms)
        )

    # -- a group root ------------------------------------------------------------------------

    def _spec(self) -> TableSpec:
        return TableSpec(kind="group", compact_interval=self.options.compact_interval, format="group")

    def _view(self) -> PublishedView:
        return CommitsView(self.logs)

    def _forget_tables(self) -> None:
        if self.rewrites is not None:  # the recovery deletes their staging directories
            self.rewrites.forget()
        self._drop_members()

    def open(self) -> RecoveryReport:
        report = super().open()
        if self.rewrites is not None:  # each table's next compaction batch, in the background
            wanted = self.compacted_tables
            tables = [t for t in self.state.table_names() if not is_quarantine(t) and (wanted is None or t in wanted)]
            self.rewrites.start(tables, self.latest_batch_id + 1)
        return report

    def close(self) -> None:
        if self.rewrites is not None:
            self.rewrites.close(discard=self._may_discard_prepared())
        super().close()

    def _load_state(self, newest: CommitRecord | None) -> None:
        self._drop_members()  # recovery may have published batches the cached tables missed
        self.state = state_of(self.storage, newest)

    def _member_logs(self) -> Callable[[str], TableLogs]:
        return self.member_logs

    def _all_logs(self) -> list[CompactibleLog[Any]]:
        logs: list[CompactibleLog[Any]] = list(self.logs.all_logs())
        for member in list(self._members.values()):
            logs.extend(member.logs.all_logs())
        return logs

    def _prepare(self) -> None:
        preparation_of(self.logs.require_sources()).advance()
        for table in list(self._touched):
            member = self._members.get(table)  # None: a recovery since dropped it, and its preparation
            if member is not None:
                preparation_of(member.logs.require_manifest()).advance()

    def member_schema(self, table: str, *, format: str, partition_by: Sequence[str]) -> TableSchema:
        """The schema of the group's table ``table`` (``commit.table_schema``), read at its first
        use in this process - after the group's recovery, which finished its pending batches."""
        member = self._member(table)
        if member.schema is None:
            child = self.storage.child(table)
            is_delta, is_iceberg, files = table_formats(format)
            table_format = table_format_of(delta=is_delta, iceberg=is_iceberg)
            guard = TableSchema(child, evolution=self.options.schema_evolution, file_format=files, table_format=table_format)
            identity = member.identity or read_identity(child)
            adopting = is_delta and identity is not None and identity.delta_app_id is not None and member.latest < 0
            target = self._delta_target(table, identity) if adopting and identity is not None else None
            guard.load(
                member.latest,
                commits=member.logs.commits,
                first_batch_id=identity.first_batch_id if identity else 0,
                partition_by=partition_by,
                fence=self.lease.check_fence,
                delta_schema=target.schema_json() if target is not None else None,
                delta_log=target.log_uri if target is not None else None,
            )
            member.schema = guard
        return member.schema

    def _member_schema_record(self, attempt: BatchAttempt, mb: MemberBatch, batch_id: int) -> SchemaRecord | None:
        """Check (before the claim) that a table's files fit its schema; the record the batch
        writes there if it creates or changes it. Quarantine tables hold what did not fit: none."""
        if mb.schema is None or is_quarantine(mb.table):
            return None
        guard = self.member_schema(mb.table, format=mb.format, partition_by=mb.partition_by)
        what = f"Table {mb.table!r} of batch {attempt.spark_batch_id} of query {attempt.query_id}"
        verdict = guard.check_files(mb.schema, mb.partition_by, what=what)
        return guard.record_for(verdict, batch_id, mb.partition_by)

    # -- the tables ----------------------------------------------------------------------------

    def _drop_members(self) -> None:
        """Forget the cached member tables, aborting the uploads their manifests began (nothing
        else holds their ids: a reopen leaked one per member)."""
        with self._members_lock:
            members, self._members = list(self._members.values()), {}
        for member in members:
            for log_ in member.logs.all_logs():
                preparation_of(log_).abort_upload()

    def member_logs(self, table: str) -> TableLogs:
        return self._member(table).logs

    def _member(self, table: str) -> Member:
        with self._members_lock:
            member = self._members.get(table)
            if member is None:
                child = self.storage.child(table)
                logs = TableLogs.open(child, interval=self.options.compact_interval, retention_ms=self.options.retention_ms, kind="member")
                manifest = logs.require_manifest()
                vouch_by_index(manifest)
                preparation = preparation_of(manifest)
                preparation.owner = self.preparation_owner
                preparation.gate = self.housekeeping.gate
                latest = manifest.latest_batch_id(refresh=True)
                record = logs.commits.record(latest) if latest is not None else None
                member = Member(logs, -1 if latest is None else latest, (record.table_rows or 0) if record else 0)
                self._members[table] = member
            return member

    def _checked_member(self, table: str) -> Member:
        """A table about to get a batch: its manifest must be where the group's state says."""
        member = self._member(table)
        expected = self._expected_latest(table)
        if member.latest != expected:
            # a writer whose lease was taken over sees its successor's batches: it is fenced
            self.lease.check_fence("stage")
            raise LogCorruptError(
                path=member.logs.manifest.uri() if member.logs.manifest else table,
                batch_id=member.latest,
                problem=f"table {table!r} of the group is at batch {member.latest}, but the group's commit "
                f"records say {expected}: something else wrote or deleted its manifest files",
                hint="Stop every other writer of this table, restore its _spark_metadata from a backup, and run `seo verify` on it.",
            )
        return member

    def _expected_latest(self, table: str) -> int:
        return self.state.latest_batch(table)

    def _check_member_identities(self, members: Sequence[MemberBatch]) -> None:
        """Every table of the batch that has an identity takes the batch's options - checked
        before any new table of it gets one, so a refused batch leaves no table behind whose
        options would refuse the batch of the corrected configuration."""
        for mb in members:
            if self._member(mb.table).identity is None:
                check_identity(self.storage.child(mb.table), self._member_spec(mb))

    def _member_identity(self, mb: MemberBatch) -> TableIdentity:
        member = self._members[mb.table]
        if member.identity is not None:
            return member.identity
        child = self.storage.child(mb.table)
        is_delta, is_iceberg, _ = table_formats(mb.format)
        identity = ensure_identity(child, self._member_spec(mb))
        identity = note_root(child, identity)
        if is_delta:
            self._check_format_reaches(self._delta_target(mb.table, identity).applied_batch(), member, child, "Delta")
        if is_iceberg:
            self._check_format_reaches(self._iceberg_target(mb.table, identity).applied_batch(), member, child, "Iceberg")
            if member.latest >= 0:  # what commits killed by earlier writers left
                discard_leftovers(self._iceberg_target(mb.table, identity), member.latest)
        member.identity = identity
        return identity

    def _member_spec(self, mb: MemberBatch) -> TableSpec:
        """What a group's table is, from the options of the batch that writes it."""
        is_delta, is_iceberg, files = table_formats(mb.format)
        return TableSpec(
            kind="member",
            compact_interval=self.options.compact_interval,
            format=files,
            partition_by=tuple(mb.partition_by),
            writer_options=tuple(mb.writer_options.items()),
            delta=is_delta,
            group="/".join([".."] * (mb.table.count("/") + 1)),
            iceberg=IcebergCatalogRef() if is_iceberg else None,  # a group's tables: the path-based default
        )

    def _check_format_reaches(self, applied: int | None, member: Member, child: Storage, name: str) -> None:
        """Refuse a member table whose Delta log or Iceberg table does not hold its manifest's batches."""
        if holds_manifest(applied, member.latest, member.logs.require_manifest()):
            return
        self.lease.check_fence("stage")  # a writer whose lease was taken over sees its successor's batches
        error = DeltaTableError if name == "Delta" else IcebergTableError
        where = "The Delta log of table" if name == "Delta" else "The Iceberg table"
        restore = "the Delta log" if name == "Delta" else "the Iceberg metadata"
        raise error(
            f"{where} {child.root_uri} holds batches up to {applied}, but its manifest holds batches up to {member.latest} "
            f"and no commit is pending: {name} readers and manifest readers would see different data. Restore {restore} "
            "(or the manifest) from a backup.",
            table=child.root_uri,
        )

    def _iceberg_target(self, table: str, identity: TableIdentity) -> IcebergTarget:
        assert identity.iceberg is not None
        target = self.iceberg_targets.get(table)
        if target is None or target.app_id != identity.iceberg.app_id:
            target = IcebergTarget(self.storage.child(table), identity.iceberg.app_id, self.options.iceberg or IcebergSettings())
            self.iceberg_targets[table] = target
        return target

    def _delta_target(self, table: str, identity: TableIdentity) -> DeltaTarget:
        assert identity.delta_app_id is not None
        target = self.delta_targets.get(table)
        if target is None or target.app_id != identity.delta_app_id:
            target = DeltaTarget(self.storage.child(table), identity.delta_app_id, self.options.delta or DeltaSettings())
            self.delta_targets[table] = target
        return target

    # -- protocol ------------------------------------------------------------------------------

    def commit_group(
        self,
        attempt: BatchAttempt,
        members: Sequence[MemberBatch],
        *,
        input_files: Sequence[InputFile] = (),
        source_ends: dict[str, dict[str, int]] | None = None,
        expected: dict[str, dict[str, int]] | None = None,
        schema: str | None = None,
        no_data: bool = False,
    ) -> CommitResult:
        """Publish group batch ``attempt.batch_id``: every table in ``members`` or none (a table
        with no files only if its batch is a ``maintenance`` one). ``no_data``: a group batch of
        no table's batch is committed all the same (the first batch of a query, which records it)."""
        members = [m for m in members if m.files or m.maintenance]
        if not members and not no_data:
            self.abort(attempt)
            return CommitResult(attempt.query_id, attempt.spark_batch_id, "empty", timings=dict(attempt.timings))
        t_plan = time.perf_counter()
        g = attempt.batch_id
        epoch = self.lease.epoch or 0
        now_ms = int(time.time() * 1000)
        self._check_member_identities(members)
        parts = [self._plan_member(attempt, mb, epoch, now_ms) for mb in members]
        state = self._next_state(parts, g, source_ends or {}, expected)
        total_rows = sum(mb.rows for mb in members if not is_quarantine(mb.table))
        group_record = attempt.record(
            g,
            epoch=epoch,
            files=[f for mb in members for f in mb.files],
            num_rows=total_rows,
            now_ms=now_ms,
            step_ms=dict(attempt.timings),
            source_files=len(input_files),
            schema=schema,
            table_rows=None if self._table_rows is None else self._table_rows + total_rows,
            datasets=state.datasets_json(),
            source_partitions=state.sources_json() if (source_ends or self.state.sources) else None,
        )
        publishes = [p.publish for p in parts]
        steps: list[CommitStep] = [
            MoveFiles(moves=[move for p in parts for move in p.plan.moves]),
            # before the members' manifests: who sees a table's batch finds its schema
            *(WriteSchema(record=p.plan.new_schema, table=p.publish.table) for p in parts if p.plan.new_schema is not None),
            PublishMembers(members=publishes),
            *(s for p in parts for s in p.plan.format_steps if s.kind == "delta"),
            *(s for p in parts for s in p.plan.format_steps if s.kind == "iceberg"),
            attempt.offsets_step(g),
            sources_step(g, input_files),
            *(p.ledger for p in parts),
            root_ledger(self, attempt, input_files, publishes),
            WriteCommit(record=group_record),
        ]
        seq = attempt.sequence(steps, epoch=epoch, now_ms=now_ms)
        self._touched = [p.table for p in publishes]
        leftovers = leftovers_of([p.plan.rewrites for p in parts if p.plan.rewrites])
        ctx = self._run(attempt, seq, t_plan, retention=self._retention(g, publishes), indexes=self._indexes(publishes), leftovers=leftovers)
        for part in parts:
            member = self._members[part.publish.table]
            if member.schema is not None:
                member.schema.committed(part.plan.new_schema, part.plan.batch_id)
            member.latest = part.plan.batch_id
            member.table_rows = part.publish.record.table_rows or 0
        self.state = state
        result = self._finish(attempt, group_record, input_files, ctx)
        if self.rewrites is not None:
            for p in publishes:
                self.rewrites.after_batch(p.table, self._members[p.table].logs.require_manifest(), p.batch_id, g + 1)
        return result

    def _plan_member(self, attempt: BatchAttempt, mb: MemberBatch, epoch: int, now_ms: int) -> _MemberPart:
        """One table's part of the group batch (``commit.table_plan``), checked before the claim."""
        member = self._checked_member(mb.table)
        identity = self._member_identity(mb)
        m = member.latest + 1
        formats = TableFormats(
            self._delta_target(mb.table, identity) if identity.is_delta else None,
            self._iceberg_target(mb.table, identity) if identity.is_iceberg else None,
        )
        ask = TableBatchAsk(
            storage=self.storage.child(mb.table),
            attempt=attempt,
            batch_id=m,
            files=mb.files,
            schema=mb.schema,
            new_schema=self._member_schema_record(attempt, mb, m),
            partition_by=tuple(mb.partition_by),
            formats=formats,
            rewrites=functools.partial(self._member_rewrites, mb.table, member, m, attempt.timings),
            table=mb.table,
            compaction=is_compaction_batch(m, member.logs.require_manifest().interval),
        )
        plan = plan_table_batch(ask)
        record = attempt.record(
            m,
            epoch=epoch,
            files=mb.files,
            num_rows=mb.rows,
            now_ms=now_ms,
            watermarks=mb.watermarks,
            schema=mb.schema,
            table_rows=member.table_rows + mb.rows,
            rewrites=plan.rewrites.notes(),
        )
        publish = MemberPublish(table=mb.table, batch_id=m, entries=plan.entries, record=record, replaced=plan.rewrites.replaced)
        return _MemberPart(mb, plan, publish, member_ledger(self, attempt, mb, m, plan.rewrites, plan.published()))

    def _member_rewrites(self, table: str, member: Member, batch_id: int, timings: dict[str, float]) -> BatchRewrites:
        if self.rewrites is None:
            return BatchRewrites(table=table)
        return self.rewrites.for_batch(table, member.logs.require_manifest(), batch_id, timings)

    def _next_state(
        self, parts: Sequence[_MemberPart], g: int, source_ends: dict[str, dict[str, int]], expected: dict[str, dict[str, int]] | None
    ) -> GroupState:
        """The group's state after batch ``g``: each dataset's table batch, the quarantine
        tables' newest batches, the source partitions' ends."""
        quarantine_latest = dict(self.state.quarantine)
        table_batches: list[TableBatch] = []
        for part in parts:
            mb, m = part.mb, part.plan.batch_id
            set_aside = is_quarantine(mb.table)
            if set_aside:
                quarantine_latest[mb.table] = m
            if not set_aside or mb.dataset is not None:
                table_batches.append(
                    TableBatch(
                        table=mb.dataset or mb.table,
                        status=mb.status,
                        batch_id=m,
                        rows=mb.rows,
                        files=len(mb.files),
                        bytes=part.publish.record.num_bytes,
                        watermarks=mb.watermarks,
                        checks=mb.checks,
                        quarantined_rows=mb.quarantined_rows,
                        maintenance=mb.maintenance,
                    )
                )
        sources = advance_sources(self.state.sources, source_ends)
        return GroupState(advance(self.state.tables, table_batches, g, expected), quarantine_latest, sources)

    def _retention(self, g: int, publishes: Sequence[MemberPublish]) -> list[tuple[CompactibleLog[Any], int]]:
        retention: list[tuple[CompactibleLog[Any], int]] = [(log_, g) for log_ in self.logs.all_logs()]
        for p in publishes:
            retention += [(log_, p.batch_id) for log_ in self._members[p.table].logs.all_logs()]
        return retention

    def _indexes(self, publishes: Sequence[MemberPublish]) -> list[tuple[object, Callable[[], None]]]:
        """The manifest indexes the batch's compaction batches of tables get built."""
        indexes: list[tuple[object, Callable[[], None]]] = []
        for p in publishes:
            member_logs = self._members[p.table].logs
            if self.options.build_manifest_index and is_compaction_batch(p.batch_id, member_logs.require_manifest().interval):
                indexes.append((("index", p.table), functools.partial(index_compact, member_logs, p.batch_id)))
        return indexes

    def tables(self) -> list[str]:
        """Every table of the group that exists (datasets with a published batch, quarantine
        tables), from the newest state."""
        return self.state.table_names()

    def current_state(self) -> GroupState:
        """The tables' state and source partitions as of the newest committed group batch - from
        memory while this writer has the group open, else read from storage without the lease
        (inspection must not take a running query's table away)."""
        if self.ready:
            return self.state
        records = self.logs.commits.latest_per_query()
        return state_of(self.storage, max(records.values(), key=lambda r: r.batch_id, default=None))


__all__ = ["GroupCommitter", "MemberBatch", "tables_in"]
