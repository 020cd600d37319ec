"""``seo compact``: small files of a table whose stream is stopped, rewritten and published by the
stream's own commit path (``commit.rewrites.data_compaction``, ``commit.rewrites.rewrite_preparation``).

A replacement takes effect only at a compaction batch (Spark's batch reader reads a ``.compact``
manifest file as the whole listing; ``docs/design/data-compaction.md``). So ``compact`` takes
the table's lease as a writer does, recovers, writes the rewrites, and commits batches of no
data up to the next compaction batch, which publishes them. The manifest's batch ids are the
table's own, not Spark's: the stream's next Spark batch still commits as the next manifest
batch. Each batch is a commit of its own, with its WAL claim; a crash leaves at most some empty
batches and a claim the next start rolls forward or back. Its batches are recorded under the
query id ``MAINTENANCE_QUERY`` (``seo status`` shows them).

A run deletes no log history (the stream's ``min_batches_to_retain`` is not recorded in the
table; the stream's next retention pass applies it). The table does not record ``retention``
either: give it (``retention_ms``) when the
stream sets one, so that a file retention is about to drop is not rewritten. Without it such
rows live on in the new file until the newest of the files it replaced expires.

A dataset group (its root, or one of its tables) is compacted the same way under the group's
lease: each group batch of the run gives every table still short of its compaction batch an
empty batch (``MemberBatch.maintenance``: its entry in the group state moves only its batch id
and keeps what describes its data), until each has published its rewrites.

A dry run takes no lease and writes nothing: it lists what would be rewritten now.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass, field

from ..commit.committer import TableCommitter
from ..commit.groups.group_committer import GroupCommitter, MemberBatch
from ..commit.options import CommitterOptions
from ..commit.protocol.lease import wait_for_release
from ..commit.rewrites.compaction_consumers import ConsumerFilter, consumer_filter
from ..commit.rewrites.data_compaction import CompactionPolicy, PlanNotes, StagedRewrite, plan, rewritable
from ..delta.settings import DeltaSettings
from ..errors import ConfigError, IdentityError
from ..iceberg.settings import IcebergCatalogRef, IcebergSettings
from ..log.compaction import is_compaction_batch, next_compaction_batch
from ..storage import open_storage
from ..storage.base import Storage
from ..table.group_state import is_quarantine
from ..table.identity import TableIdentity, read_identity
from ..table.library_queries import MAINTENANCE_QUERY
from ..table.table_logs import TableLogs
from .group_tables import group_of, group_tables, newest_group_record
from .table_extras import require_table_extras

#: ``min_batches_to_retain`` of a run: more batches than any table has, so it deletes no log file.
NO_LOG_RETENTION = 1 << 40


@dataclass
class PlannedRewrite:
    """One new file: its partition directory, the files it replaces and their bytes."""

    directory: str
    files: list[str]
    bytes: int

    @classmethod
    def of(cls, staged: StagedRewrite) -> PlannedRewrite:
        rewrite = staged.rewrite
        return cls(posixpath.dirname(rewrite.final), [p for p, _ in rewrite.replaced], sum(n for _, n in rewrite.replaced))

    def in_table(self, table: str) -> PlannedRewrite:
        """The same rewrite, its paths relative to the group root above ``table``."""
        return PlannedRewrite(f"{table}/{self.directory}".rstrip("/"), [f"{table}/{f}" for f in self.files], self.bytes)


@dataclass
class CompactReport:
    table: str
    dry_run: bool
    #: the rewrites planned (a dry run) or published
    rewrites: list[PlannedRewrite] = field(default_factory=list)
    #: the manifest batches committed (empty ones first, the compaction batch last)
    batches: list[int] = field(default_factory=list)
    #: a dry run: the batches a run would commit now
    would_commit: list[int] = field(default_factory=list)
    #: live data files before and after
    files_before: int = 0
    files_after: int = 0
    #: why nothing may be rewritten now (a registered consumer, ``commit.rewrites.compaction_consumers``)
    blocked_by: str | None = None
    #: why nothing is rewritten, when nothing is (what the planning passed over: ``PlanNotes``)
    why_nothing: str | None = None
    #: a dataset group's run: ``batches`` are group batches, each table's own are here, and the
    #: rewrites' directories start with their table's path under the group root
    group: bool = False
    table_batches: dict[str, list[int]] = field(default_factory=dict)


def compact_table(
    storage: Storage,
    policy: CompactionPolicy,
    *,
    dry_run: bool = False,
    retention_ms: int | None = None,
    lease_timeout_ms: int = 60_000,
) -> CompactReport:
    """Rewrite the small files ``policy`` picks and publish them (module docstring)."""
    require_table_extras(storage)
    identity = _table_identity(storage)
    for consumer in policy.consumers:  # a mistyped location would silently stop every rewrite
        if not open_storage(consumer.checkpoint).exists("offsets"):
            raise ConfigError(
                f"--consumer {consumer.checkpoint}: no Spark checkpoint there (no offsets/). Give the checkpoint location "
                "of the downstream query that reads this table as a file source.",
                table=storage.root_uri,
            )
    if identity.kind != "table":
        root, only = (storage, None) if identity.kind == "group" else group_of(storage, identity)
        return _compact_group(root, only, policy, dry_run=dry_run, retention_ms=retention_ms, lease_timeout_ms=lease_timeout_ms)
    consumers = consumer_filter(policy.consumers, storage.root_uri)  # read once (a real run's writer reads them itself)
    report = CompactReport(table=storage.root_uri, dry_run=dry_run, blocked_by=consumers.blocked)
    if dry_run:
        return _dry_run(storage, identity, policy, retention_ms, report, consumers)
    committer = TableCommitter(storage, _options(identity, policy, retention_ms, lease_timeout_ms))
    wait_for_release(storage)
    try:
        committer.open()
        committer.janitor.drain()  # the rewrites of the next compaction batch, written at the start
        manifest = committer.logs.require_manifest()
        report.files_before = len(manifest.files())
        prepared = committer.rewrites.preparation.ready if committer.rewrites is not None else []
        report.rewrites = [PlannedRewrite.of(r) for r in prepared]
        if not prepared:
            report.files_after = report.files_before
            notes = committer.rewrites.preparation.notes if committer.rewrites is not None else None
            report.why_nothing = report.blocked_by or (notes.why_nothing(policy) if notes is not None else None)
            return report
        while True:
            n = committer.last_spark_batch(MAINTENANCE_QUERY)
            with committer.batch(MAINTENANCE_QUERY, 0 if n is None else n + 1, mode="rename") as attempt:
                result = committer.commit(attempt, [], num_rows=0, no_data=True)
            assert result.batch_id is not None
            report.batches.append(result.batch_id)
            if is_compaction_batch(result.batch_id, manifest.interval):
                break
        report.files_after = len(manifest.files())
        return report
    finally:
        committer.close()


def _compact_group(
    root: Storage, only: str | None, policy: CompactionPolicy, *, dry_run: bool, retention_ms: int | None, lease_timeout_ms: int
) -> CompactReport:
    """``compact_table`` of a dataset group: every Parquet-file table of it, or ``only`` that one."""
    identity = read_identity(root)
    assert identity is not None
    report = CompactReport(table=root.root_uri if only is None else root.child(only).root_uri, dry_run=dry_run, group=True)
    tables = _group_tables(root, identity, only)
    if dry_run:
        return _group_dry_run(root, identity, tables, policy, retention_ms, report)
    committer = GroupCommitter(root, _group_options(identity, policy, retention_ms, lease_timeout_ms))
    committer.compacted_tables = list(tables)
    wait_for_release(root)
    try:
        committer.open()
        committer.janitor.drain()  # each table's rewrites of its next compaction batch, written at the start
        assert committer.rewrites is not None
        pending: dict[str, MemberBatch] = {}
        whys: list[str] = []
        for table, member_identity in tables.items():
            report.blocked_by = report.blocked_by or consumer_filter(policy.consumers, root.child(table).root_uri).blocked
            report.files_before += len(committer.member_logs(table).require_manifest().files())
            rewrites = committer.rewrites.get(table)
            prepared = rewrites.preparation.ready if rewrites is not None else []
            report.rewrites += [PlannedRewrite.of(r).in_table(table) for r in prepared]
            notes = rewrites.preparation.notes if rewrites is not None else None
            if not prepared and notes is not None:
                whys.append(f"{table}: {notes.why_nothing(policy)}")
            if prepared:
                member = pending[table] = _maintenance_batch(table, member_identity)
                # a table written before schema records: its schema is adopted now, while its
                # commit records still hold it (the run's empty batches record none)
                committer.member_schema(table, format=member.format, partition_by=member.partition_by)
        if not pending:
            report.why_nothing = report.blocked_by or "; ".join(whys) or None
        while pending:
            n = committer.last_spark_batch(MAINTENANCE_QUERY)
            with committer.batch(MAINTENANCE_QUERY, 0 if n is None else n + 1, mode="rename") as attempt:
                result = committer.commit_group(attempt, list(pending.values()))
            assert result.batch_id is not None
            report.batches.append(result.batch_id)
            for table in list(pending):
                latest = committer.state.latest_batch(table)
                report.table_batches.setdefault(table, []).append(latest)
                if is_compaction_batch(latest, committer.member_logs(table).require_manifest().interval):
                    del pending[table]
        report.files_after = sum(len(committer.member_logs(table).require_manifest().files()) for table in tables)
        return report
    finally:
        committer.close()


def _group_tables(root: Storage, identity: TableIdentity, only: str | None) -> dict[str, TableIdentity]:
    """The group's tables a run compacts (its dataset tables of Parquet files), with their identities."""
    out: dict[str, TableIdentity] = {}
    names = [t for t in group_tables(root, identity) if not is_quarantine(t)]
    if only is not None and only not in names:
        raise ConfigError(
            f"{root.child(only).root_uri} is a table of the dataset group at {root.root_uri} that has no published batch "
            "in the group's state (a quarantine table, or one not yet written): nothing to compact.",
            table=root.child(only).root_uri,
        )
    for table in names if only is None else [only]:
        member = read_identity(root.child(table))
        if member is None:
            raise IdentityError(
                f"{root.child(table).root_uri}: the group's state names this table, but it has no _seo/table. Restore it from a "
                "backup and run `seo verify` on the group.",
                table=root.child(table).root_uri,
            )
        if member.format != "parquet":
            if only is not None:
                _table_identity(root.child(table))  # its refusal
            continue
        out[table] = member
    return out


def _maintenance_batch(table: str, identity: TableIdentity) -> MemberBatch:
    """The empty batch a run gives ``table``: its format and layout as its identity records them."""
    return MemberBatch(
        table=table,
        files=[],
        rows=0,
        format="+".join(identity.table_formats) or identity.format,
        partition_by=tuple(identity.partition_by),
        writer_options=dict(identity.writer_options),
        maintenance=True,
    )


def _group_options(identity: TableIdentity, policy: CompactionPolicy, retention_ms: int | None, lease_timeout_ms: int) -> CommitterOptions:
    """The group's writer, as ``_options`` is a table's (its tables' Delta and Iceberg settings are the defaults)."""
    return CommitterOptions(
        compact_interval=identity.compact_interval,
        delta=DeltaSettings(),
        iceberg=IcebergSettings(),
        retention_ms=retention_ms,
        min_batches_to_retain=NO_LOG_RETENTION,
        lease_timeout_ms=lease_timeout_ms,
        description="seo compact",
        compaction=policy,
    )


def _group_dry_run(
    root: Storage,
    identity: TableIdentity,
    tables: dict[str, TableIdentity],
    policy: CompactionPolicy,
    retention_ms: int | None,
    report: CompactReport,
) -> CompactReport:
    """Each table's dry run; the group batches a run would commit (until the last table's compaction batch)."""
    needed = 0
    whys: list[str] = []
    for table, member in tables.items():
        child = root.child(table)
        consumers = consumer_filter(policy.consumers, child.root_uri)
        sub = _dry_run(
            child, member, policy, retention_ms, CompactReport(table=child.root_uri, dry_run=True, blocked_by=consumers.blocked), consumers
        )
        report.rewrites += [r.in_table(table) for r in sub.rewrites]
        report.files_before += sub.files_before
        report.files_after += sub.files_after
        report.blocked_by = report.blocked_by or sub.blocked_by
        if not sub.rewrites:
            whys.append(f"{table}: {sub.why_nothing}")
        if sub.would_commit:
            report.table_batches[table] = sub.would_commit
            needed = max(needed, len(sub.would_commit))
    newest = newest_group_record(root, identity)
    nxt = 0 if newest is None else newest.batch_id + 1
    report.would_commit = list(range(nxt, nxt + needed))
    report.why_nothing = None if report.rewrites else "; ".join(whys)
    return report


def _table_identity(storage: Storage) -> TableIdentity:
    identity = read_identity(storage)
    if identity is None:
        raise ConfigError(f"{storage.root_uri} is no table of this library (no _seo/identity): nothing to compact.", table=storage.root_uri)
    if identity.kind != "group" and identity.format != "parquet":
        raise ConfigError(
            f"{storage.root_uri} is a format={identity.format!r} table: seo compact rewrites the Parquet files of parquet, Delta and Iceberg tables.",
            table=storage.root_uri,
        )
    return identity


def _options(identity: TableIdentity, policy: CompactionPolicy, retention_ms: int | None, lease_timeout_ms: int) -> CommitterOptions:
    """A writer of the table as its identity records it, with ``policy`` and no housekeeping of
    its own beyond what a batch needs."""
    return CommitterOptions(
        format=identity.format,
        partition_by=tuple(identity.partition_by),
        compact_interval=identity.compact_interval,
        writer_options=tuple(sorted(identity.writer_options.items())),
        delta=DeltaSettings() if identity.delta_app_id is not None else None,
        # No snapshot expiry of its own (the stream's is not recorded; its next commit applies it).
        # A catalog-backed table is opened with pyiceberg's configuration of that catalog.
        iceberg=IcebergSettings() if identity.iceberg is not None else None,
        iceberg_catalog=identity.iceberg.catalog if identity.iceberg is not None else IcebergCatalogRef(),
        spark_manifest=identity.spark_manifest,
        retention_ms=retention_ms,
        # the stream's log retention is not recorded in the table: delete no history of it
        min_batches_to_retain=NO_LOG_RETENTION,
        lease_timeout_ms=lease_timeout_ms,
        description="seo compact",
        compaction=policy,
    )


def _dry_run(
    storage: Storage, identity: TableIdentity, policy: CompactionPolicy, retention_ms: int | None, report: CompactReport, consumers: ConsumerFilter
) -> CompactReport:
    logs = TableLogs.for_identity(storage, identity, retention_ms=retention_ms)
    manifest = logs.require_manifest()
    latest = manifest.latest_batch_id(refresh=True)
    report.files_before = len(manifest.files()) if latest is not None else 0
    now = int(time.time() * 1000)
    live = rewritable(manifest, latest, now) if latest is not None else []
    notes = PlanNotes()
    for candidate in plan(storage, live, policy, now_ms=now, eligible=consumers.allows, roots=identity.root_uris, notes=notes):
        report.rewrites.append(
            PlannedRewrite(candidate.directory, [rel for _, rel in candidate.files], sum(entry.size for entry, _ in candidate.files))
        )
    if report.rewrites:
        nxt = (-1 if latest is None else latest) + 1
        report.would_commit = list(range(nxt, next_compaction_batch(nxt - 1, manifest.interval) + 1))
    else:
        report.why_nothing = report.blocked_by or notes.why_nothing(policy)
    report.files_after = report.files_before - sum(len(r.files) - 1 for r in report.rewrites)
    return report


__all__ = ["MAINTENANCE_QUERY", "CompactReport", "PlannedRewrite", "compact_table"]
