"""``verify``: check a table's logs against its storage, without changing anything.

Errors (the table is damaged, readers may fail or miss data):
  * a committed data file is missing, or its size differs from the manifest, or (local disks)
    it is a symbolic link out of the table;
  * a log (manifest, offsets, commits, sources) has a gap, a stray file far beyond its other
    batch files, or a file that does not parse;
  * the commits or sources log disagrees with the manifest's latest batch;
  * a committed Parquet file's schema disagrees with the table schema (``maintenance.file_schemas``:
    a table written before schema enforcement, or files added by another tool);
  * a rewrite a retained compaction batch published is live beside a file it replaced, or its
    rows differ from the recorded ones or from the replaced files' (``maintenance.rewrite_checks``).
Warnings (harmless, cleaned by ``recover``/``gc``):
  * orphan data files (in the table, in no retained manifest entry, retired by this sink:
    ``maintenance.provenance``) - ``seo gc`` deletes them;
  * foreign data files (in the table, in no retained manifest entry, and no record shows this
    sink wrote them): another tool's, or there before the table; no reader sees their rows and
    ``seo gc`` keeps them;
  * pending WAL entries and staging directories (a writer crashed; the next start recovers).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ..commit.protocol.wal import CommitSequenceStore
from ..commit.table_schema import read_only_schema
from ..errors import ExactlyOnceError
from ..manifest.empty_batches import empty_between
from ..readers.committed_files import CommittedFiles
from ..readers.file_checks import inspect_files
from ..readers.visibility import committed_files
from ..storage.base import Storage
from ..table.identity import TableIdentity, read_identity
from ..table.layout import STAGING_DIR, is_hidden
from ..table.schema_log import SCHEMA_DIR, schema_batches, schema_path
from ..table.table_logs import TableLogs, open_manifest
from ..table.temp_files import is_work_file, temp_and_work_files
from .file_schemas import check_file_schemas
from .group_tables import group_of, group_tables
from .iceberg_checks import check_iceberg
from .kept import kept_files
from .pending import PendingCommits, pending_commits
from .provenance import intent_targets, provenance
from .reports import VerifyReport
from .rewrite_checks import check_rewrites
from .table_extras import require_table_extras


def referenced_relative_paths(storage: Storage, pending: PendingCommits | None = None, table: str | None = None) -> set[str]:
    """Every data file named by any retained manifest file (latest state and time-travel states)
    or by a pending commit (``pending``, for the table at ``table`` in the pending commits' root),
    relative to the table root. Entries outside the table are no file of it and are left out."""
    identity = read_identity(storage)
    manifest = open_manifest(storage, identity)
    return kept_files(storage, identity, manifest, manifest.list_batch_ids(), pending or PendingCommits(), table, strict=False)


def _check_logs_parse(logs: TableLogs, identity: TableIdentity | None, report: VerifyReport, claimed: set[int]) -> None:
    """Every log parses and has no gaps. An offsets or sources record of a batch a pending WAL
    claim completes (``claimed``) may be cut short by a power cut (a commit writes them without
    waiting for the disk): the claim's roll-forward rewrites it, so that is a warning, not an error."""
    for log_ in logs.all_logs():
        if log_ is not logs.manifest and identity is None:
            continue
        try:
            gaps = log_.gaps()
        except ExactlyOnceError as exc:  # a stray file far beyond the others: named, not enumerated
            report.add("error", "stray-file", getattr(exc, "path", log_.uri()), str(exc))
            continue
        for gap in gaps:
            report.add("error", "log-gap", log_.uri(gap), f"{log_.kind} batch {gap} is missing")
        for batch_id in log_.list_batch_ids():
            try:
                log_.read(batch_id)
            except ExactlyOnceError as exc:
                if (log_ is logs.offsets or log_ is logs.sources) and batch_id in claimed:
                    report.add(
                        "warning",
                        "pending-record",
                        log_.uri(batch_id),
                        f"{exc}; batch {batch_id} has a pending WAL claim, whose roll-forward (`seo recover`, or the sink's "
                        "next start) writes this record again",
                    )
                else:
                    report.add("error", "log-corrupt", log_.uri(batch_id), str(exc))


def verify_table(
    storage: Storage,
    *,
    check_orphans: bool = True,
    skip: tuple[str, ...] = (),
    pending: PendingCommits | None = None,
    table: str | None = None,
    progress: Callable[[str], None] | None = None,
    check_schemas: bool = True,
) -> VerifyReport:
    """``skip``: directories (relative, ending in ``/``) that hold other tables (a group's);
    ``pending``/``table``: a group's pending commits and this table's path in the group;
    ``progress``: told what verify is doing (a phase, and a count while it lists storage);
    ``check_schemas``: read every committed Parquet file's footer (``maintenance.file_schemas``)."""
    tell = progress or (lambda _: None)
    tell(f"reading the logs of {storage.root_uri}")
    if pending is None:  # (a group's table: its group checked them all)
        require_table_extras(storage)
    identity = read_identity(storage)
    if identity is not None and identity.kind == "group":
        return verify_group(storage, check_orphans=check_orphans, check_schemas=check_schemas)
    report = VerifyReport(table=storage.root_uri)
    logs = TableLogs.for_identity(storage, identity)
    assert logs.manifest is not None
    latest = logs.manifest.latest_batch_id(refresh=True)
    report.latest_batch_id = latest
    if pending is None:
        pending, table = _pending_of(storage, identity, report)
    claimed = in_flight(logs, pending, table, latest)
    report.in_flight = claimed
    _check_logs_parse(logs, identity, report, claimed)
    if identity is not None and latest is not None:
        _check_records_reach(logs, identity, latest, claimed, report)
    # committed files exist with their recorded size
    try:
        current = committed_files(storage.root_uri, storage_options=storage.options(), allow_outside_root=True)
    except ExactlyOnceError as exc:
        report.add("error", "manifest-unreadable", logs.manifest.uri(), str(exc))
        return report
    report.files = len(current)
    report.bytes = current.total_bytes
    tell(f"checking {len(current):,} committed files")
    problems = inspect_files(current)
    for uri, problem in problems.absent:
        kind = "missing-file" if problem == "does not exist" else "size-mismatch"
        report.add("error", kind, uri, f"listed in the manifest but {problem}")
    for uri, target in problems.escapes:
        report.add("error", "symlink-outside-root", uri, f"a symbolic link to {target}, outside the table root; readers refuse it")
    manifest = logs.manifest

    def empty_after(held: int) -> bool:  # the batches after ``held`` hold no file: no format commit of theirs
        return manifest is not None and latest is not None and empty_between(manifest, held, latest)

    if identity is not None and identity.delta_app_id is not None:
        _check_delta(storage, identity.delta_app_id, latest, current, report, claimed, empty_after)
    if identity is not None and identity.iceberg is not None:
        check_iceberg(storage, identity.iceberg, latest, current, report, claimed, empty_after)
    if identity is not None and latest is not None:
        _check_schemas(storage, identity, latest, current, report, files=check_schemas and not problems.absent)
    if latest is not None:
        check_rewrites(storage, logs.commits, current, report.add)
    if identity is None or identity.kind != "member":
        _check_leftovers(storage, report, pending)
    if check_orphans:
        _check_orphans(storage, identity, pending, table, skip, report, tell, logs.manifest.uri())
    return report


def _check_records_reach(logs: TableLogs, identity: TableIdentity, latest: int, claimed: Collection[int], report: VerifyReport) -> None:
    """The commits and sources logs end where the manifest does, or only pending claims lag."""
    for log_, name in ((logs.commits, "commits"), (logs.sources, "sources")):
        if log_ is None:  # a table of a dataset group: its input files are the group's
            continue
        last = log_.latest_batch_id(refresh=True)
        if last != latest and latest >= identity.first_batch_id:
            behind = range((-1 if last is None else last) + 1, latest + 1)
            # a crash after the manifest, before the records: the pending claims complete them
            # at the next start (reported as pending-wal); anything else is damage
            if not ((last is None or last < latest) and all(b in claimed for b in behind)):
                report.add("error", "log-mismatch", log_.uri(), f"{name} log ends at batch {last}, manifest at {latest}")


def _check_orphans(
    storage: Storage,
    identity: TableIdentity | None,
    pending: PendingCommits,
    table: str | None,
    skip: tuple[str, ...],
    report: VerifyReport,
    tell: Callable[[str], None],
    manifest_uri: str,
) -> None:
    """Files in the table that no retained manifest entry, pending claim or intent names: this
    sink's retired files (``orphan``) and files of others (``foreign-file``), as warnings."""
    try:
        referenced = referenced_relative_paths(storage, pending, table)
    except ExactlyOnceError as exc:
        report.add("error", "manifest-unreadable", manifest_uri, str(exc))
        return
    tell("listing storage for orphan files")
    referenced |= intent_targets(*_staging_owner(storage, identity, table))  # an attempt's files: its staging's
    proven = provenance(storage, identity)
    for uri in proven.unreadable:
        report.add("warning", "retired-unreadable", uri, "a retired-files record does not parse: `seo gc` keeps the files it names")
    for seen, info in enumerate(storage.walk_files(), 1):
        if seen % 5000 == 0:
            tell(f"listing storage for orphan files: {seen:,} seen")
        if is_hidden(info.path) or info.path in referenced or info.path.startswith(skip):
            continue
        if proven.left_ms(info.path) is None:
            report.add("warning", "foreign-file", storage.uri(info.path), FOREIGN.format(size=info.size))
            continue
        report.add(
            "warning",
            "orphan",
            storage.uri(info.path),
            f"{info.size} bytes this sink retired, in no retained manifest entry; `seo gc` deletes it",
        )


#: What ``verify`` says of a file no record shows this sink wrote (``maintenance.provenance``).
FOREIGN = (
    "{size} bytes in the table's directory that no record shows this sink wrote (another tool's file, or one that was "
    "there before the table): no reader of the table sees its rows, and `seo gc` keeps it. Move it out if it belongs "
    "to another job; to make such files part of a new table, see 'Adopting an existing directory' in the operations docs"
)


def _staging_owner(storage: Storage, identity: TableIdentity | None, table: str | None) -> tuple[Storage, str | None]:
    """Where the table's writer stages (its own root, or its group's) and the table's path there."""
    if identity is not None and identity.kind == "member" and table is not None:
        try:
            return group_of(storage, identity)[0], table
        except ExactlyOnceError:
            pass
    return storage, None


def _pending_of(storage: Storage, identity: TableIdentity | None, report: VerifyReport) -> tuple[PendingCommits, str | None]:
    """The pending commits that concern the table at ``storage`` and its path in their root: its
    own WAL's, or (a table of a group) its group's."""
    if identity is not None and identity.kind == "member":
        try:
            owner, table = group_of(storage, identity)
        except ExactlyOnceError as exc:
            report.add("error", "group-missing", storage.uri("_seo/table"), str(exc))
            return PendingCommits(), None
        return _pending(owner, report), table
    return _pending(storage, report), None


def in_flight(logs: TableLogs, pending: PendingCommits, table: str | None, latest: int | None) -> set[int]:
    """The table's batches a pending claim completes at the next start: published in the manifest
    with the very entries the claim names (a stale claim of a fenced writer names other files),
    or the next batch, which the claim publishes. What is behind for any other batch is damage."""
    assert logs.manifest is not None
    newest = -1 if latest is None else latest
    out: set[int] = set()
    for batch_id, paths in pending.publishes.get(table, {}).items():
        if batch_id == newest + 1:
            out.add(batch_id)
        elif batch_id <= newest:
            try:
                records = logs.manifest.get(batch_id)
            except ExactlyOnceError:
                continue
            if records is not None and paths <= {e.path for e in records}:
                out.add(batch_id)
    return out


def _check_delta(
    storage: Storage,
    app_id: str,
    latest: int | None,
    current: CommittedFiles,
    report: VerifyReport,
    claimed: set[int],
    empty_after: Callable[[int], bool] = lambda held: False,
) -> None:
    """A ``format="delta"`` table: the Delta log holds the manifest's batches and the same files."""
    from ..delta.target import DeltaTarget

    target = DeltaTarget(storage, app_id)
    try:
        applied = target.applied_batch()
        live = {f.path for f in target.live_files()}
    except ExactlyOnceError as exc:
        report.add("error", "delta-unreadable", target.log_uri, str(exc))
        return
    applied = -1 if applied is None else applied
    latest = -1 if latest is None else latest
    if applied < latest and empty_after(applied):
        applied = latest  # ``seo compact``'s batches of no file: no Delta commit of theirs
    if applied < latest:
        if all(b in claimed for b in range(applied + 1, latest + 1)):
            report.add(
                "warning",
                "delta-pending",
                target.log_uri,
                f"batches {applied + 1}..{latest} are pending in the WAL; the next start (or `seo recover`) commits them to Delta",
            )
        else:
            report.add(
                "error", "delta-behind", target.log_uri, f"holds batches up to {applied}, the manifest up to {latest}: Delta readers miss data"
            )
    elif applied > latest:
        report.add("error", "delta-ahead", target.log_uri, f"holds batches up to {applied}, the manifest only up to {latest}")
    manifest_files = set(current.relative)
    if applied == latest and live != manifest_files:
        only_delta, only_manifest = len(live - manifest_files), len(manifest_files - live)
        report.add(
            "warning",
            "delta-diverged",
            target.log_uri,
            f"{only_delta} file(s) only in the Delta table, {only_manifest} only in the manifest: another Delta writer "
            "changed the table; Delta readers and _spark_metadata readers see different rows",
        )


def _check_schemas(storage: Storage, identity: TableIdentity, latest: int, current: CommittedFiles, report: VerifyReport, *, files: bool) -> None:
    """The table schema: records above the latest batch, a table without one, files that
    disagree with it (``files``; Parquet tables)."""
    stray = [b for b in schema_batches(storage) if b > latest]
    for batch_id in stray:
        report.add(
            "warning",
            "schema-pending",
            storage.uri(schema_path(batch_id)),
            f"the schema record of batch {batch_id}, which is not published (yet): its WAL claim rolls it forward, or the next writer deletes it",
        )
    try:
        guard = read_only_schema(storage)
    except ExactlyOnceError as exc:
        report.add("error", "log-corrupt", storage.uri(SCHEMA_DIR), str(exc))
        return
    if guard.current is None and guard.schema is not None and identity.kind != "group":
        report.add(
            "warning",
            "no-table-schema",
            storage.uri(SCHEMA_DIR),
            "no table schema is recorded (the table was written before schema enforcement): the next writer adopts the "
            "schema of the newest commit record, which the files are checked against here",
        )
    schema = guard.schema
    if files and schema is not None and identity.format == "parquet":
        for severity, kind, path, detail in check_file_schemas(current, schema, identity.partition_by):
            report.add(severity, kind, path, detail)


def _pending(storage: Storage, report: VerifyReport) -> PendingCommits:
    """The pending commits (what they name is no orphan); an unreadable WAL entry is an error."""
    try:
        return pending_commits(storage)
    except ExactlyOnceError as exc:
        report.add("error", "log-corrupt", storage.uri("_seo/wal"), str(exc))
        return PendingCommits()


def _check_leftovers(storage: Storage, report: VerifyReport, pending: PendingCommits) -> None:
    """Leftovers of crashed writers: a pending WAL entry, staged data, temp files (a write cut
    off by a killed writer). Compaction work files are not reported: a writer
    keeps one for its next compaction, and it outlives a clean stop until the next writer
    starts or ``seo gc`` runs."""
    wal = CommitSequenceStore(storage)
    for batch_id in wal.pending():
        report.add("warning", "pending-wal", storage.uri(wal.path(batch_id)), "a commit in flight or interrupted; `seo recover` completes it")
    for entry in storage.list_dir(STAGING_DIR):
        if pending.dir_named(entry.path):
            what = "staged data a pending claim names; the next start or `seo recover` moves it into place (do not delete it)"
        else:
            what = "staged data of an unfinished attempt; `seo recover` removes it"
        report.add("warning", "staging", storage.uri(entry.path), what)
    for info in temp_and_work_files(storage):
        if not is_work_file(info.name):
            report.add(
                "warning",
                "temp-file",
                storage.uri(info.path),
                "a write in flight, or cut off by a killed writer; the next writer removes it when it takes the table, `seo gc` when it is old",
            )


def verify_group(storage: Storage, *, check_orphans: bool = True, check_schemas: bool = True) -> VerifyReport:
    """A dataset group: its own logs, then every table its newest record names, each against the
    batch the group says it is at."""
    identity = read_identity(storage)
    report = VerifyReport(table=storage.root_uri)
    logs = TableLogs.for_identity(storage, identity)
    pending = _pending(storage, report)
    report.latest_batch_id = logs.commits.latest_batch_id(refresh=True)
    newest = -1 if report.latest_batch_id is None else report.latest_batch_id
    claimed = set()
    for b, attempt in pending.attempts.items():  # next, or published by this very claim
        try:
            record = logs.commits.record(b) if b <= newest else None
        except ExactlyOnceError:  # reported as log-corrupt below
            record = None
        if b == newest + 1 or (record is not None and record.attempt == attempt):
            claimed.add(b)
    _check_logs_parse(logs, identity, report, claimed)
    _check_leftovers(storage, report, pending)
    try:
        expected = group_tables(storage, identity)
    except ExactlyOnceError as exc:
        report.add("error", "log-corrupt", logs.commits.uri(), str(exc))
        return report
    for name, batch_id in sorted(expected.items()):
        nested = tuple(t[len(name) + 1 :] + "/" for t in expected if t.startswith(name + "/"))
        sub = verify_table(storage.child(name), check_orphans=check_orphans, skip=nested, pending=pending, table=name, check_schemas=check_schemas)
        report.files += sub.files
        report.bytes += sub.bytes
        report.problems += sub.problems
        ahead = range(batch_id + 1, (sub.latest_batch_id if sub.latest_batch_id is not None else -1) + 1)
        if ahead and all(b in sub.in_flight for b in ahead):
            report.add(
                "warning",
                "group-pending",
                storage.uri(name),
                f"table is at batch {sub.latest_batch_id}, the group's newest commit record says {batch_id}; "
                "the pending WAL claim completes the group's record at the next start (or `seo recover`)",
            )
        elif sub.latest_batch_id != batch_id:
            report.add(
                "error",
                "group-mismatch",
                storage.uri(name),
                f"table is at batch {sub.latest_batch_id}, the group's newest commit record says {batch_id}",
            )
    return report
