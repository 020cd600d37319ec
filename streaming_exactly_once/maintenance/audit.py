"""``seo audit``: check that a table holds each acknowledged record once, from its ledger.

Every batch publishes a ledger (``table.ledger``) in its WAL claim. The audit reads the ledgers of
the batches after its mark (``table.audit_mark``) and checks, per batch (``table.ledger_checks``
for the first three; docs/design/audit-ledger.md lists them all):

* ``offsets``: per partition, what batches wrote is disjoint and gap-free (a gap only where the
  batch recorded an allowed one);
* ``rows``: read = written + rejected + dropped, and the files' rows are the rows written;
* ``compaction``: a compaction batch's new files hold the rows of the files they replaced;
* ``ledger``: every manifest batch has a ledger, and no ledger is ahead of the manifest;
* ``files``: the manifest batch holds the ledger's files and no others; each still-live file
  exists with its recorded size and checksum; no data file is live twice;
* ``formats``: ``_spark_metadata``, Delta and Iceberg hold the same file set at the latest batch.

Batches a pending WAL claim completes are in flight: the audit stops before them. Batches from
before the ledger existed are reported as unaudited. The cost of a run after a mark is the new
batches' ledgers, manifest files and data-file tails, not the history's: the live listing (a
compact file and the deltas after it) is read, and the live-twice and formats checks run, only
when the manifest's newest compact file changed since the mark (``audit_scope``), or with --from;
such a run also lists the data directories, so a file of an earlier batch deleted or cut short
since is found then (``audit_storage``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..commit.table_steps.ledger_step import checksum_of
from ..errors import CatalogNotConfiguredError, ExactlyOnceError, LogCorruptError, MissingDependencyError, TableNotFoundError
from ..log.compaction import is_compaction_batch
from ..manifest.manifest_log import ManifestLog
from ..manifest.paths import decode_uri
from ..readers.table_roots import TableRoots, relative_path, table_roots
from ..storage.base import Storage
from ..table.audit_mark import AuditMark, read_mark, write_mark
from ..table.identity import TableIdentity, read_identity
from ..table.ledger import LedgerRecord, read_ledger
from ..table.ledger_checks import Violation, offset_violations, row_violations
from ..table.table_logs import TableLogs
from .audit_live import compact_violations, compacts_to_check, held_by_newest
from .audit_scope import manifest_scope, own_entries
from .audit_storage import stored_file_violations
from .group_tables import group_tables_at
from .pending import pending_commits

CHECKS = ("ledger", "offsets", "rows", "files", "compaction", "formats")


@dataclass
class AuditReport:
    """What one audit run checked and found (``to_json``: ``docs/cli/schemas/audit.json``)."""

    table: str
    latest_batch_id: int | None = None
    audited_from: int = 0
    audited_to: int | None = None
    ledger_from: int | None = None
    unaudited: list[int] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    #: storage reads the run made (ledgers, manifest batches, file tails): flat per new batch
    reads: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # check -> why it could not run
    violations: list[Violation] = field(default_factory=list)
    tables: list[AuditReport] = field(default_factory=list)  # a group's tables
    #: batches after the ledger's start that have none (each a violation); not in the JSON
    missing_ledgers: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations and all(t.passed for t in self.tables)

    def all_violations(self) -> list[tuple[str, Violation]]:
        return [(self.table, v) for v in self.violations] + [pair for t in self.tables for pair in t.all_violations()]

    def to_json(self) -> dict[str, Any]:
        failed = {v.check for _, v in self.all_violations()}
        return {
            "table": self.table,
            "passed": self.passed,
            "latestBatchId": self.latest_batch_id,
            "auditedFrom": self.audited_from,
            "auditedTo": self.audited_to,
            "ledgerFrom": self.ledger_from,
            "unaudited": _ranges(self.unaudited),
            "inFlight": self.in_flight,
            "reads": self.reads,
            "checks": {c: ("failed" if c in failed else ("skipped" if c in self.skipped else "passed")) for c in CHECKS},
            "skipped": dict(self.skipped),
            "violations": [{**v.to_json(), "table": t} for t, v in self.all_violations()],
            "tables": [t.to_json() for t in self.tables],
        }


def _ranges(batches: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for b in sorted(batches):
        if out and out[-1][1] == b - 1:
            out[-1][1] = b
        else:
            out.append([b, b])
    return out


class _Counted:
    """The audit's reads, counted (the incremental cost a test checks)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.reads = 0
        #: the data files this run checked against their ledger
        self.checked: set[str] = set()

    def ledger(self, batch_id: int) -> LedgerRecord | None:
        self.reads += 1
        return read_ledger(self.storage, batch_id)

    def tail(self, path: str, n: int) -> bytes:
        self.reads += 1
        return self.storage.read_tail(path, n)


def audit_table(storage: Storage, *, from_batch: int | None = None, record: bool = True) -> AuditReport:
    """Audit the table (or dataset group) at ``storage`` from its mark (``from_batch``: from
    there instead); ``record``: save the mark and verdict for the next run."""
    identity = read_identity(storage)
    if identity is None:
        raise TableNotFoundError(f"{storage.root_uri} is not a table of this library (no _seo/table): nothing to audit.")
    if identity.kind == "group":
        return _audit_group(storage, from_batch=from_batch, record=record)
    pending = pending_commits(storage) if identity.kind != "member" else None
    claimed = set(pending.publishes.get(None, {})) if pending is not None else set()
    return _audit_one(storage, identity, claimed, from_batch=from_batch, record=record)


def _audit_group(storage: Storage, *, from_batch: int | None, record: bool) -> AuditReport:
    """A group: its root's ledgers (the source offsets of every group batch), then each table."""
    identity = read_identity(storage)
    assert identity is not None
    pending = pending_commits(storage)
    logs = TableLogs.for_identity(storage, identity)
    report = _audit_one(storage, identity, set(pending.batches), from_batch=from_batch, record=record, logs=logs)
    for table in sorted(group_tables_at(storage, logs.commits, report.latest_batch_id)):
        child = storage.child(table)
        child_identity = read_identity(child)
        claimed = set(pending.publishes.get(table, {}))
        report.tables.append(_audit_one(child, child_identity, claimed, from_batch=from_batch, record=record))
    return report


def _audit_one(
    storage: Storage, identity: TableIdentity | None, claimed: set[int], *, from_batch: int | None, record: bool, logs: TableLogs | None = None
) -> AuditReport:
    """One table's audit; ``logs``: a group root's (it has no manifest)."""
    report = AuditReport(table=storage.root_uri)
    root = logs is not None
    logs = logs if logs is not None else TableLogs.for_identity(storage, identity)
    io = _Counted(storage)
    mark = read_mark(storage) if from_batch is None else None
    manifest = None if root else logs.require_manifest()
    # a group root has no manifest: its commits log numbers the group batches
    scope = manifest_scope(logs.commits if manifest is None else manifest, mark, from_batch=from_batch)
    if mark is not None and mark.audited_to > (-1 if scope.latest is None else scope.latest):  # an older table restored under it
        report.skipped["mark"] = f"the audit mark (audited to batch {mark.audited_to}) is ahead of the table: every batch is audited"
        io.reads += scope.ops
        mark, scope = None, manifest_scope(logs.commits if manifest is None else manifest, None, from_batch=from_batch)
    latest = scope.latest
    io.reads += scope.ops
    report.latest_batch_id = latest
    start = from_batch if from_batch is not None else (mark.audited_to + 1 if mark is not None else 0)
    report.audited_from = start
    report.ledger_from = mark.ledger_from if mark is not None else None
    marks = dict(mark.marks) if mark is not None else _marks_before(io, start, report)
    clean_to, clean_marks = start - 1, dict(marks)
    # every root the table has had: a moved or copied table's manifest names its old one
    roots = table_roots(storage, identity)
    entries = _live(manifest, roots, latest, report) if manifest is not None and scope.whole else None
    live = None if entries is None else [p for p, _ in entries]
    newest = -1 if latest is None else latest
    for b in range(start, newest + 1):
        if b in claimed:
            report.in_flight = sorted(c for c in claimed if c >= b)
            break
        found = _batch(io, manifest, roots, live, b, newest, marks, report)
        report.audited_to = b
        if found and clean_to == b - 1:
            clean_to, clean_marks = b, dict(marks)
    _ahead(io, newest, claimed, report)
    report.violations += scope.misnamed_violations(newest + 1)
    again = sorted({*scope.changed, *(mark.recheck if mark is not None else ())})
    failed = _recheck(io, manifest, roots, live, [b for b in again if b < start and b not in claimed], newest, report) if manifest is not None else ()
    if manifest is not None and entries is not None and live is not None:
        _live_twice(live, report)
        # files of batches audited before: still there, with their sizes
        stored, calls = stored_file_violations(storage, [e for e in entries if "://" not in e[0]], io.checked, newest)
        report.violations += stored
        io.reads += calls
        seen = mark.manifest.compact if mark is not None and mark.manifest is not None and from_batch is None else None
        _compacts(io, manifest, roots, compacts_to_check(manifest, latest, seen), newest, live, report)
        _formats(storage, identity, manifest, newest, live, claimed, report)
    elif identity is not None and (identity.delta_app_id is not None or identity.iceberg is not None):
        report.skipped["formats"] = (
            f"the manifest's newest compact file (batch {scope.seen.compact}) is unchanged since the last audit: the formats are "
            "compared when it changes (once per compact interval) or with --from"
        )
    report.reads += io.reads
    if record:
        first = report.violations[0].message if report.violations else ""
        write_mark(
            storage,
            AuditMark(
                audited_to=clean_to if report.violations else (report.audited_to if report.audited_to is not None else start - 1),
                ledger_from=report.ledger_from,
                marks=clean_marks if report.violations else marks,
                passed=not report.violations,
                time_ms=int(time.time() * 1000),
                latest_batch_id=latest,
                violations=len(report.violations),
                detail=first[:500],
                # after a violation the next run reads the whole table again
                manifest=None if report.violations else scope.seen,
                recheck=failed,
            ),
        )
    return report


def _compacts(io: _Counted, manifest: ManifestLog, roots: TableRoots, compacts: list[int], latest: int, live: list[str], report: AuditReport) -> None:
    """Each compact file written since the last run against the files before it (``audit_live``)."""
    relative = partial(_relative, roots)
    for c in compacts:
        try:
            ledger = io.ledger(c)
        except LogCorruptError:
            continue  # named by the batch's own check
        io.reads += 2
        held = held_by_newest(manifest, c, latest, live, relative) if c == compacts[-1] else None
        found, skipped = compact_violations(manifest, c, ledger, relative, held)
        report.violations += found
        if skipped is not None:
            report.skipped["compact"] = skipped


def _recheck(
    io: _Counted, manifest: ManifestLog, roots: TableRoots, live: list[str] | None, batches: list[int], latest: int, report: AuditReport
) -> tuple[int, ...]:
    """Check again the files of audited batches whose manifest file changed since their audit (or
    that failed this last time); returns those that fail, for the next run to check again."""
    failed: list[int] = []
    for b in batches:
        before = len(report.violations)
        try:
            ledger = io.ledger(b)
        except LogCorruptError as exc:
            report.violations.append(Violation("ledger", b, f"The ledger of batch {b} cannot be read: {exc}"))
            ledger = None
        if ledger is not None:
            _files(io, manifest, roots, live, ledger, latest, report)
        if len(report.violations) > before:
            failed.append(b)
    return tuple(failed)


def _marks_before(io: _Counted, start: int, report: AuditReport) -> dict[str, int]:
    """The offsets marks before batch ``start``, from the ledgers before it (``--from``)."""
    marks: dict[str, int] = {}
    for b in range(start):
        try:
            ledger = io.ledger(b)
        except LogCorruptError:
            continue
        if ledger is None:
            continue
        if report.ledger_from is None:
            report.ledger_from = b
        offset_violations(ledger, marks)  # only raises the marks here
    return marks


def _live(manifest: ManifestLog, roots: TableRoots, latest: int | None, report: AuditReport) -> list[tuple[str, int]] | None:
    """The live data files, table-relative, with their sizes (duplicates kept: a file listed twice is a finding)."""
    if latest is None:
        return []
    try:
        entries = manifest.files(as_of=latest)
    except ExactlyOnceError as exc:
        report.violations.append(Violation("files", None, f"The manifest cannot be read: {exc}"))
        return None
    report.reads += 1
    return [(_relative(roots, e.path), e.size) for e in entries]


def _relative(roots: TableRoots, uri: str) -> str:
    """A manifest path (encoded, as Hadoop prints it) relative to the table root (unencoded),
    under whichever of the table's roots it was written; an entry outside them stays a URI."""
    rel = relative_path(roots, uri)
    return rel if rel is not None else decode_uri(uri)


def _batch(
    io: _Counted,
    manifest: ManifestLog | None,
    roots: TableRoots,
    live: list[str] | None,
    b: int,
    latest: int,
    marks: dict[str, int],
    report: AuditReport,
) -> bool:
    """Check batch ``b``; True if it passed (or is unaudited)."""
    before = len(report.violations)
    try:
        ledger = io.ledger(b)
    except LogCorruptError as exc:
        report.violations.append(Violation("ledger", b, f"The ledger of batch {b} cannot be read: {exc}"))
        return False
    if ledger is None:
        if report.ledger_from is None or b < report.ledger_from:
            report.unaudited.append(b)
            return True
        report.missing_ledgers.append(b)
        report.violations.append(
            Violation(
                "ledger",
                b,
                f"Manifest batch {b} has no ledger ({io.storage.uri(f'_seo/ledger/{b}')}), though batch {report.ledger_from} and later "
                "have one: it was published outside the sink's commit, or its ledger was deleted (its offsets are unknown: the next "
                "batch's start is not checked against the mark). Check its files with seo log --batch.",
            )
        )
        return False
    if report.ledger_from is None:
        report.ledger_from = b
    report.violations += row_violations(ledger)
    report.violations += offset_violations(ledger, marks, gaps_known=b - 1 not in report.missing_ledgers)
    if manifest is not None:
        _files(io, manifest, roots, live, ledger, latest, report)
    return len(report.violations) == before


def _files(
    io: _Counted, manifest: ManifestLog, roots: TableRoots, live: list[str] | None, ledger: LedgerRecord, latest: int, report: AuditReport
) -> None:
    """The manifest batch holds the ledger's files (each once); the live ones are intact (``live``
    None: between compact files, where a batch's own files are all live)."""
    b = ledger.batch_id
    recorded = {f.path for f in ledger.files}
    adopted = {f.path for f in ledger.adopted}
    compaction = is_compaction_batch(b, manifest.interval)
    try:
        io.reads += 1
        entries = own_entries(manifest, b, len(ledger.files)) if compaction else None
        if entries is None or not recorded <= {_relative(roots, e.path) for e in entries}:
            entries = manifest.get(b)  # another order than the batch's own files last: read it all
    except ExactlyOnceError:
        entries = None
    published: set[str] = set()
    where = manifest.storage.uri(manifest.path(b))
    if entries is not None:
        listed = Counter(_relative(roots, e.path) for e in entries if not e.is_dir)
        published = set(listed)
        for path, count in sorted(listed.items()):
            if count > 1:
                report.violations.append(
                    Violation(
                        "files",
                        b,
                        f"Manifest batch {b} lists {path} {count} times: every reader reads its rows {count} times. Delete the "
                        f"repeated line from {where} (or restore that file from a backup); the next audit checks the batch again.",
                        path=path,
                    )
                )
        missing = sorted(recorded - published)
        extra = sorted(published - recorded - adopted) if not compaction else []
        for path in missing:
            report.violations.append(
                Violation(
                    "files",
                    b,
                    f"Batch {b}'s ledger names {path}, which its manifest batch does not list: no reader sees its rows. Restore "
                    f"{where} from a backup (seo log --batch {b} shows what the batch wrote).",
                    path=path,
                )
            )
        for path in extra:
            report.violations.append(
                Violation(
                    "files",
                    b,
                    f"Manifest batch {b} lists {path}, which the batch's ledger does not name: a file published outside the sink's "
                    f"commit (a hand-edited or duplicated manifest entry). Delete its line from {where}, or restore that file from "
                    "a backup; the next audit checks the batch again.",
                    path=path,
                )
            )
    live_set = set(live) if live is not None else (published if entries is not None else recorded)
    for f in (*ledger.files, *ledger.adopted):
        if f.path in live_set:
            _intact(io, b, f.path, f.size, f.checksum, f.checksum_bytes, report)


def _intact(io: _Counted, b: int, path: str, size: int, checksum: str, checksum_bytes: int, report: AuditReport) -> None:
    storage = io.storage
    io.checked.add(path)
    try:
        info = storage.info(path)
    except FileNotFoundError:
        report.violations.append(
            Violation(
                "files",
                b,
                f"Data file {path} of batch {b} is live in the manifest but missing from storage: its rows are lost to every "
                f"reader. Restore it from a backup (size {size} bytes).",
                path=path,
            )
        )
        return
    if info.size != size:
        report.violations.append(
            Violation(
                "files",
                b,
                f"Data file {path} of batch {b} has {info.size} bytes, its ledger {size}: it was replaced or cut short. Restore it.",
                path=path,
            )
        )
        return
    tail = io.tail(path, checksum_bytes)  # the bytes the checksum covers: the whole file, or its tail
    if checksum_of(tail) != checksum:
        report.violations.append(
            Violation(
                "files",
                b,
                f"Data file {path} of batch {b} has the recorded size but not the recorded checksum ({checksum}): its bytes were "
                "altered after the batch published it. Restore it from a backup.",
                path=path,
            )
        )


def _ahead(io: _Counted, latest: int, claimed: set[int], report: AuditReport) -> None:
    """A ledger of the batch after the newest, without a claim that publishes it: a ledger of no batch."""
    nxt = latest + 1
    if nxt in claimed:
        return
    try:
        ledger = io.ledger(nxt)
    except LogCorruptError:
        ledger = None
    if ledger is not None:
        report.violations.append(
            Violation(
                "ledger",
                nxt,
                f"A ledger of batch {nxt} exists, but the table's newest published batch is {latest} and no claim is pending: "
                "a batch was recorded that no reader sees. Run seo verify; the rows it names are not in the table.",
            )
        )


def _live_twice(live: list[str], report: AuditReport) -> None:
    for path, count in sorted(Counter(live).items()):
        if count > 1:
            report.violations.append(
                Violation(
                    "files",
                    None,
                    f"Data file {path} is live {count} times in the manifest: every reader reads its rows {count} times. Delete the "
                    "repeated line from the newest compact file of _spark_metadata or a batch file after it (or restore them from a "
                    "backup).",
                    path=path,
                )
            )


def _formats(
    storage: Storage, identity: TableIdentity | None, manifest: ManifestLog, latest: int, live: list[str], claimed: set[int], report: AuditReport
) -> None:
    """Delta and Iceberg hold the manifest's file set at the latest batch."""
    if identity is None or claimed:
        if claimed:
            report.skipped["formats"] = "a commit is in flight"
        return
    listings: dict[str, Callable[[], tuple[int | None, list[str]]]] = {}
    if identity.delta_app_id is not None:
        listings["Delta"] = lambda: _delta_files(storage, identity)
    if identity.iceberg is not None:
        listings["Iceberg"] = lambda: _iceberg_files(storage, identity)
    expected = set(live)
    for name, listing in listings.items():
        try:
            applied, files = listing()
        except (CatalogNotConfiguredError, MissingDependencyError):
            raise  # this environment lacks something: no finding about the table (``seo``: exit code 4)
        except ExactlyOnceError as exc:
            report.violations.append(Violation("formats", latest, f"The {name} table cannot be read: {exc}"))
            continue
        report.reads += 1
        for path, count in sorted(Counter(files).items()):
            if count > 1:
                report.violations.append(
                    Violation(
                        "files", None, f"Data file {path} is live {count} times in the {name} table: its readers read it {count} times.", path=path
                    )
                )
        held = set(files)
        if applied is not None and applied < latest and held == expected:
            continue  # ``seo compact``'s empty batches after it: no commit of theirs
        for path in sorted(held - expected):
            report.violations.append(
                Violation(
                    "formats",
                    latest,
                    f"The {name} table holds {path}, which the manifest (batch {latest}) does not: {name} readers see rows "
                    "others do not. Another writer changed it; remove the file from it or rebuild it from the manifest.",
                    path=path,
                )
            )
        for path in sorted(expected - held):
            report.violations.append(
                Violation(
                    "formats",
                    latest,
                    f"The manifest (batch {latest}) holds {path}, which the {name} table does not: {name} readers miss its rows.",
                    path=path,
                )
            )


def _delta_files(storage: Storage, identity: TableIdentity) -> tuple[int | None, list[str]]:
    from ..delta.target import DeltaTarget

    assert identity.delta_app_id is not None
    target = DeltaTarget(storage, identity.delta_app_id)
    return target.applied_batch(), [f.path for f in target.live_files()]


def _iceberg_files(storage: Storage, identity: TableIdentity) -> tuple[int | None, list[str]]:
    from ..iceberg.target import IcebergTarget

    assert identity.iceberg is not None
    target = IcebergTarget(storage, identity.iceberg.app_id, catalog=identity.iceberg.catalog)
    return target.applied_batch(), [f.path for f in target.live_files()]
