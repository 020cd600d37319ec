"""``gc``: delete what no reader can see and no writer still needs - never an in-flight batch.

Deleted (or, with ``dry_run``, only listed): orphan data files this sink retired more than
``older_than`` ago (never a foreign file: one no record shows this sink wrote is reported and
kept), stale staging directories, indexes of deleted compact files, and old temp and work files
a killed writer left. Safe because gc holds the table's lease (a live writer makes it refuse),
keeps pending commits whole (the WAL is read before the manifest), refuses instead of guessing
(``GcRefusedError`` whenever a reader would refuse the table, nothing deleted) and collects a
dataset group's tables each against its own manifest. ``docs/design/maintenance.md`` has the
whole argument.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ..commit.protocol.attempt_verdict import ABORT, COMMIT, decide
from ..commit.protocol.lease import Lease, LeaseState, read_lease_state, wait_for_release
from ..commit.protocol.recovery import abort_attempt
from ..errors import (
    ConcurrentWriterError,
    DeltaTableError,
    GcRefusedError,
    IcebergTableError,
    IdentityError,
    LogError,
    MissingBatchError,
    ReaderError,
)
from ..manifest.manifest_index import delete_stale_indexes
from ..readers.manifest_checks import check_complete
from ..storage.base import Storage
from ..table.identity import TableIdentity, read_identity
from ..table.layout import STAGING_DIR, is_hidden, parse_staging_name
from ..table.table_logs import open_manifest
from ..table.temp_files import lease_taken_ms, leftover_files, temp_and_work_files
from .group_tables import group_of, group_tables
from .held import DEFAULT_MIN_BATCHES_TO_RETAIN, ICEBERG_METADATA, HeldFiles, held_files
from .kept import kept_files
from .pending import PendingCommits, pending_commits
from .provenance import intent_targets, provenance
from .table_extras import require_table_extras


@dataclass
class GcReport:
    dry_run: bool
    orphans: list[tuple[str, int]] = field(default_factory=list)
    staging: list[str] = field(default_factory=list)
    temp_files: list[tuple[str, int]] = field(default_factory=list)  # (URI, size) of temp and work files
    young_skipped: int = 0
    #: (URI, size) of files no record shows this sink wrote (``maintenance.provenance``): kept
    foreign: list[tuple[str, int]] = field(default_factory=list)
    #: URIs of retired-files records that do not parse (their files were kept as foreign)
    unreadable_records: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # URIs of the tables collected
    pending_batches: list[int] = field(default_factory=list)  # pending commits whose files were kept
    writer_live: bool = False  # a dry run beside a live writer: its next batches may change the list
    #: files kept although the latest batch does not list them, by why and until when (``maintenance.held``)
    held: list[HeldFiles] = field(default_factory=list)
    min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN  # the stream's: when held files become collectable

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.orphans)


@dataclass
class _Plan:
    """What one table's collection would delete (paths relative to its storage)."""

    storage: Storage
    files: list[tuple[str, int]] = field(default_factory=list)
    #: what the table's retained batches, pending commits and Delta versions name: never deleted
    kept: set[str] = field(default_factory=set)
    #: retired-files records to delete once ``files`` are gone: no file they name is left
    spent_records: list[str] = field(default_factory=list)


def collect_garbage(
    storage: Storage,
    *,
    older_than_ms: int = 3_600_000,
    dry_run: bool = False,
    now_ms: int | None = None,
    lease_timeout_ms: int = 60_000,
    min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN,
) -> GcReport:
    """Collect the table (or dataset group) at ``storage``; see the module docstring.
    ``min_batches_to_retain``: the stream's, to say when the files it keeps become collectable."""
    require_table_extras(storage)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - older_than_ms
    identity = read_identity(storage)
    owner, member = (storage, None) if identity is None or identity.kind != "member" else group_of(storage, identity)
    report = GcReport(dry_run=dry_run, min_batches_to_retain=min_batches_to_retain)
    if dry_run:
        state = read_lease_state(owner)
        report.writer_live = state is not None and state.alive
    with _held_lease(owner, lease_timeout_ms=lease_timeout_ms, dry_run=dry_run) as lease:
        try:
            pending = pending_commits(owner)  # before any manifest: see the module docstring
            report.pending_batches = list(pending.batches)
            plans, staging = _plan(owner, member, identity, pending, cutoff, report)
        except (LogError, ReaderError, IdentityError, DeltaTableError, IcebergTableError) as exc:
            raise GcRefusedError(
                f"seo gc deleted nothing in {storage.root_uri}: {exc}",
                table=storage.root_uri,
                reason=type(exc).__name__,
            ) from exc
        for plan in plans:
            report.tables.append(plan.storage.root_uri)
            for path, size in plan.files:
                report.orphans.append((plan.storage.uri(path), size))
                if lease is not None:
                    lease.check_fence("delete")
                    plan.storage.delete(path)
            if lease is not None:
                for record in plan.spent_records:
                    lease.check_fence("delete")
                    plan.storage.delete(record)
        kept_by_owner = next((plan.kept for plan in plans if plan.storage is owner), set())
        for path in staging:
            if lease is not None:
                parsed = parse_staging_name(path.rsplit("/", 1)[-1])
                if parsed is not None:
                    lease.check_fence("decide")
                    if decide(owner, parsed[0], parsed[1], ABORT, epoch=lease.epoch or 0) == COMMIT:
                        continue  # a recovery is rolling this attempt forward
                lease.check_fence("delete")
                abort_attempt(owner, path, keep=kept_by_owner)
            report.staging.append(owner.uri(path))
        _collect_temp_files(owner if member is None else None, plans, lease, cutoff, report)
        if lease is not None:
            for plan in plans:
                delete_stale_indexes(plan.storage, open_manifest(plan.storage, read_identity(plan.storage)))
    return report


def _collect_temp_files(owner: Storage | None, plans: list[_Plan], lease: Lease | None, cutoff: int, report: GcReport) -> None:
    """Temp and work files of the collected tables (and of the group root ``owner``) older than
    ``cutoff`` and than gc's own lease (module docstring); a dry run lists those older than
    ``cutoff``."""
    stores = {plan.storage.root_uri: plan.storage for plan in plans}
    if owner is not None:
        stores.setdefault(owner.root_uri, owner)
    before = cutoff if lease is None or lease.epoch is None else min(cutoff, lease_taken_ms(lease.storage, lease.epoch))
    epoch = None if lease is None else lease.epoch
    for store in stores.values():
        dead = leftover_files(store, written_before_ms=before, own_epoch=epoch)
        report.young_skipped += len(temp_and_work_files(store)) - len(dead)
        for info in dead:
            if lease is not None:
                lease.check_fence("delete")
                store.delete(info.path)
            report.temp_files.append((store.uri(info.path), info.size))


@contextlib.contextmanager
def _held_lease(owner: Storage, *, lease_timeout_ms: int, dry_run: bool) -> Iterator[Lease | None]:
    """The lease of the table or group at ``owner`` for the duration (None for a dry run, which
    changes nothing and so runs beside a live writer: it lists what gc would delete now)."""
    if dry_run:
        yield None
        return
    state = wait_for_release(owner)
    if state is not None and state.alive:
        raise _busy(owner, state)
    lease = Lease(owner, timeout_ms=lease_timeout_ms, description="seo gc")
    try:
        lease.acquire()
    except ConcurrentWriterError:
        state = read_lease_state(owner)
        if state is None or not state.alive:
            raise
        raise _busy(owner, state) from None
    lease.start_heartbeat()
    try:
        yield lease
    finally:
        lease.release()


def _busy(owner: Storage, state: LeaseState) -> ConcurrentWriterError:
    w = state.writer
    who = f"writer {w.writer_id[:8]} (pid {w.pid} on {w.host}" + (f", {w.description}" if w.description else "") + ")" if w else "a writer"
    return ConcurrentWriterError(
        f"seo gc needs {owner.root_uri} to itself, but it is being written by {who}, epoch {state.epoch}, "
        f"{state.reason}. A commit could publish files gc is about to delete: stop the query (sink.stop(), "
        "or Ctrl-C on `seo run`) and run gc when it is stopped.",
        table=owner.root_uri,
        epoch=state.epoch,
    )


def _plan(
    owner: Storage, member: str | None, identity: TableIdentity | None, pending: PendingCommits, cutoff: int, report: GcReport
) -> tuple[list[_Plan], list[str]]:
    """Every deletion, decided before the first one; raises if any table must be refused."""
    owner_identity = identity if member is None else read_identity(owner)
    if owner_identity is not None and owner_identity.kind == "group":
        tables = group_tables(owner, owner_identity)
        chosen = sorted(tables) if member is None else [member]
        if member is not None and member not in tables:
            tables[member] = -1  # a table the group has not published to yet
        plans = [_plan_table(owner.child(t), t, pending, _nested(t, tables), cutoff, report, expected=tables[t]) for t in chosen]
        return plans, ([] if member is not None else _plan_staging(owner, pending, cutoff, report))
    plan = _plan_table(owner, None, pending, [], cutoff, report, intents=intent_targets(owner))
    return [plan], _plan_staging(owner, pending, cutoff, report)


def _nested(table: str, tables: Iterable[str]) -> list[str]:
    """Other tables of the group below ``table``, relative to it."""
    prefix = table + "/"
    return [t[len(prefix) :] + "/" for t in tables if t.startswith(prefix)]


def _plan_table(
    storage: Storage,
    table: str | None,
    pending: PendingCommits,
    nested: list[str],
    cutoff: int,
    report: GcReport,
    *,
    intents: set[str] | None = None,
    expected: int | None = None,
) -> _Plan:
    """``expected``: the batch a group's state says this table is at (its manifest must get there)."""
    identity = read_identity(storage)
    manifest = open_manifest(storage, identity)
    ids = check_complete(storage, identity, manifest)
    latest = ids[-1] if ids else -1
    if expected is not None and latest < expected:
        raise MissingBatchError(
            directory=manifest.uri(),
            missing=list(range(latest + 1, min(expected, latest + 10) + 1)),
            context=f"the group's newest commit record says the table is at batch {expected}",
            hint="Manifest files were deleted; readers would miss committed data. Restore them from a backup.",
        )
    keep = kept_files(storage, identity, manifest, ids, pending, table, strict=True)
    plan = _Plan(storage, kept=keep)
    proven = provenance(storage, identity)
    report.unreadable_records += proven.unreadable
    left_behind: set[str] = set()
    held: dict[str, int] = {}
    not_held = pending.files_under(table)
    for info in storage.walk_files():
        if is_hidden(info.path) or info.path.startswith(tuple(nested)):
            continue
        if info.path in keep and info.path not in not_held and not info.path.startswith(ICEBERG_METADATA):
            held[info.path] = info.size
        left_behind.add(info.path)
        if info.path in keep or info.path in (intents or ()):
            continue
        left_ms = proven.left_ms(info.path)
        if left_ms is None:  # not provably the sink's: reported, never deleted
            report.foreign.append((storage.uri(info.path), info.size))
            continue
        if max(info.mtime_ms, left_ms) > cutoff:  # a reader that planned before it left may still read it
            report.young_skipped += 1
            continue
        plan.files.append((info.path, info.size))
    plan.spent_records = proven.spent(left_behind - {path for path, _ in plan.files})
    report.held += held_files(storage, identity, manifest, ids, held, min_batches_to_retain=report.min_batches_to_retain)
    return plan


def _plan_staging(owner: Storage, pending: PendingCommits, cutoff: int, report: GcReport) -> list[str]:
    """Staging directories no pending commit names and nothing in which is young."""
    stale = []
    for entry in owner.list_dir(STAGING_DIR):
        if not entry.is_dir or pending.dir_named(entry.path):
            continue
        newest = max((f.mtime_ms for f in owner.walk_files(entry.path)), default=entry.mtime_ms)
        if newest > cutoff:
            report.young_skipped += 1
            continue
        stale.append(entry.path)
    return stale


__all__ = ["GcReport", "collect_garbage"]
