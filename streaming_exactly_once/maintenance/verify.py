"""``verify``: check a table's logs against its storage, without changing anything.

Errors (the table is damaged, readers may fail or miss data):
  * a committed data file is missing, or its size differs from the manifest;
  * a log (manifest, offsets, commits, sources) has a gap or a file that does not parse;
  * the commits or sources log disagrees with the manifest's latest batch.
Warnings (harmless, cleaned by ``recover``/``gc``):
  * orphan data files (in the table, in no retained manifest entry) - left by crashed writers
    that were not this sink, by Spark's own sink, or by direct-mode attempts killed mid-write;
  * pending WAL entries and staging directories (a writer crashed; the next start recovers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..commit.wal import CommitSequenceStore
from ..errors import ExactlyOnceError
from ..manifest.manifest_log import ManifestLog
from urllib.parse import unquote

from ..manifest.paths import encode_uri, normalize_uri
from ..readers.visibility import absent_files, committed_files, infer_original_root
from ..storage.base import Storage
from ..table.group_state import split_state
from ..table.identity import read_identity
from ..table.layout import STAGING_DIR, is_hidden
from ..table.table_logs import TableLogs


@dataclass
class Problem:
    severity: str  # "error" | "warning"
    kind: str
    path: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "kind": self.kind, "path": self.path, "detail": self.detail}


@dataclass
class VerifyReport:
    table: str
    latest_batch_id: int | None = None
    files: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, severity: str, kind: str, path: str, detail: str) -> None:
        self.problems.append(Problem(severity, kind, path, detail))

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "ok": self.ok,
            "latestBatchId": self.latest_batch_id,
            "files": self.files,
            "bytes": self.bytes,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "problems": [p.to_json() for p in self.problems],
        }


def referenced_relative_paths(storage: Storage) -> set[str]:
    """Every data file named by any retained manifest file (latest state and time-travel states).

    The union of all present manifest files is the union of every readable snapshot: a compact
    file holds everything up to it, deltas add the rest. Each file is read once.
    """
    identity = read_identity(storage)
    manifest = ManifestLog(storage, default_interval=identity.compact_interval if identity else 10)
    encoded: set[str] = set()
    for batch_id in manifest.list_batch_ids():
        encoded.update(e.path for e in manifest.read(batch_id))
    root = identity.root_uri if identity is not None else infer_original_root(sorted(encoded)[:1])
    if root is None:
        return set()
    prefix = encode_uri(normalize_uri(root)).rstrip("/") + "/"
    return {unquote(normalize_uri(p)[len(prefix):]) for p in encoded if normalize_uri(p).startswith(prefix)}


def _check_logs_parse(logs: TableLogs, identity, report: VerifyReport) -> None:
    """Every log parses and has no gaps."""
    for log_ in logs.all_logs():
        if log_ is not logs.manifest and identity is None:
            continue
        for gap in log_.gaps():
            report.add("error", "log-gap", log_.uri(gap), f"{log_.kind} batch {gap} is missing")
        for batch_id in log_.list_batch_ids():
            try:
                log_.read(batch_id)
            except ExactlyOnceError as exc:
                report.add("error", "log-corrupt", log_.uri(batch_id), str(exc))


def verify_table(storage: Storage, *, check_orphans: bool = True) -> VerifyReport:
    identity = read_identity(storage)
    if identity is not None and identity.kind == "group":
        return verify_group(storage, check_orphans=check_orphans)
    report = VerifyReport(table=storage.root_uri)
    logs = TableLogs.for_identity(storage, identity)
    assert logs.manifest is not None
    latest = logs.manifest.latest_batch_id(refresh=True)
    report.latest_batch_id = latest
    _check_logs_parse(logs, identity, report)
    if identity is not None and latest is not None:
        for log_, name in ((logs.commits, "commits"), (logs.sources, "sources")):
            if log_ is None:  # a table of a dataset group: its input files are the group's
                continue
            last = log_.latest_batch_id(refresh=True)
            if last != latest and latest >= identity.first_batch_id:
                report.add("error", "log-mismatch", log_.uri(), f"{name} log ends at batch {last}, manifest at {latest}")
    # committed files exist with their recorded size
    try:
        current = committed_files(storage.root_uri, storage_options=storage.options(), allow_outside_root=True)
    except ExactlyOnceError as exc:
        report.add("error", "manifest-unreadable", storage.uri("_spark_metadata"), str(exc))
        return report
    report.files = len(current)
    report.bytes = current.total_bytes
    for uri, problem in absent_files(current):
        kind = "missing-file" if problem == "does not exist" else "size-mismatch"
        report.add("error", kind, uri, f"listed in the manifest but {problem}")
    _check_leftovers(storage, report)
    if check_orphans:
        referenced = referenced_relative_paths(storage)
        for info in storage.walk_files():
            if is_hidden(info.path) or info.path in referenced:
                continue
            report.add("warning", "orphan", storage.uri(info.path), f"{info.size} bytes in no retained manifest entry; `seo gc` deletes it")
    return report


def _check_leftovers(storage: Storage, report: VerifyReport) -> None:
    """Leftovers of crashed writers: a pending WAL entry, staged data."""
    wal = CommitSequenceStore(storage)
    for batch_id in wal.pending():
        report.add("warning", "pending-wal", storage.uri(wal.path(batch_id)), "a commit in flight or interrupted; `seo recover` completes it")
    for entry in storage.list_dir(STAGING_DIR):
        report.add("warning", "staging", storage.uri(entry.path), "staged data of an unfinished attempt; `seo recover` removes it")


def verify_group(storage: Storage, *, check_orphans: bool = True) -> VerifyReport:
    """A dataset group: its own logs, then every table its newest record names, each against the
    batch the group says it is at."""
    identity = read_identity(storage)
    report = VerifyReport(table=storage.root_uri)
    logs = TableLogs.for_identity(storage, identity)
    _check_logs_parse(logs, identity, report)
    _check_leftovers(storage, report)
    per_query = logs.commits.latest_per_query()
    newest = max(per_query.values(), key=lambda r: r.batch_id, default=None)
    report.latest_batch_id = newest.batch_id if newest is not None else None
    state = dict(newest.datasets or {}) if newest is not None else {}
    datasets, quarantine = split_state(state)
    expected = {name: e["batchId"] for name, e in datasets.items() if "batchId" in e}
    expected.update(quarantine)
    for name, batch_id in sorted(expected.items()):
        sub = verify_table(storage.child(name), check_orphans=check_orphans)
        report.files += sub.files
        report.bytes += sub.bytes
        report.problems += sub.problems
        if sub.latest_batch_id != batch_id:
            report.add(
                "error", "group-mismatch", storage.uri(name),
                f"table is at batch {sub.latest_batch_id}, the group's newest commit record says {batch_id}",
            )
    return report
