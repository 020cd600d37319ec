"""What the torture matrix checks after each cycle, on local disk and on S3 alike.

* ``read_rows`` - every id of a table (a group: of its tables) through three readers: an
  independent one (the manifest listed and parsed with ``json``, every listed file read in full
  with pyarrow, through nothing of the library but its storage's ``list_dir``/``read_bytes``),
  the library's ``read.arrow`` and, for Delta, delta-rs. Missing listed files are counted.
* ``recorded_batches`` - the Spark batches the commits log records (parsed with ``json``).
* ``judge`` - every row of a committed batch once; any other batch all or nothing; nothing else.
* ``audit_problems`` - ``seo audit --from 0`` of the table (a group: its root and tables), in
  this process: every violation its ledgers show, named.
* ``seo`` - the CLI as an operator runs it: a process of its own, ``--json``.
* ``snapshot`` - every file's bytes (digest), for "a refused restart changed nothing".
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow.parquet as pq

from tests.commit.processes import REPO

#: lease bookkeeping a writer writes before it may read the table's identity under its lease
LEASE_FILES = ("_seo/epochs/", "_seo/heartbeats/")


@dataclass
class Rows:
    """The ids one reader returned (all tables, and per table of a group), or why it could
    not, and the listed files it missed."""

    ids: Counter = field(default_factory=Counter)
    by_table: dict[str, Counter] = field(default_factory=dict)
    missing_files: list[str] = field(default_factory=list)
    error: str | None = None

    def add(self, table: str, ids: Iterable[int]) -> None:
        found = Counter(ids)
        self.ids.update(found)
        self.by_table.setdefault(table, Counter()).update(found)


def _manifest_files(storage, manifest_dir: str) -> list[tuple[str, int]]:
    """(path relative to the root, size) of every file the manifest's latest state lists."""
    names = [i.path.rsplit("/", 1)[-1] for i in storage.list_dir(manifest_dir)]
    by_batch = {int(n.split(".")[0]): n for n in names if n[:1].isdigit()}
    if not by_batch:
        return []
    latest = max(by_batch)
    start = max((b for b, n in by_batch.items() if n.endswith(".compact")), default=0)
    root = storage.root_uri.rstrip("/") + "/"
    out = []
    for batch in range(start, latest + 1):
        if batch not in by_batch:
            raise AssertionError(f"{manifest_dir} has no batch {batch} (its latest is {latest})")
        lines = storage.read_bytes(f"{manifest_dir}/{by_batch[batch]}").decode("utf-8").split("\n")
        if lines[0] != "v1":
            raise AssertionError(f"{manifest_dir}/{by_batch[batch]}: header {lines[0][:20]!r}")
        for line in lines[1:]:
            if line:
                entry = json.loads(line)
                path = unquote(entry["path"])
                if not path.startswith(root):
                    raise AssertionError(f"{manifest_dir}: {path} is outside {root}")
                out.append((path[len(root) :], entry["size"]))
    return out


def independent_rows(storage, manifest_dirs: Iterable[str]) -> Rows:
    out = Rows()
    try:
        for manifest_dir in manifest_dirs:
            table = manifest_dir.split("/")[0] if not manifest_dir.startswith("_") else ""
            for path, size in _manifest_files(storage, manifest_dir):
                try:
                    data = storage.read_bytes(path)
                except FileNotFoundError:
                    out.missing_files.append(path)
                    continue
                if len(data) != size:
                    raise AssertionError(f"{path}: {len(data)} bytes, the manifest says {size}")
                out.add(table, pq.read_table(io.BytesIO(data), columns=["id"]).column("id").to_pylist())
    except Exception as exc:  # noqa: BLE001 - a table its readers cannot read is the finding
        out.error = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def _each(tables: list[str], read_one: Callable[[str], Counter]) -> Rows:
    out = Rows()
    try:
        for table in tables:
            out.add(table, read_one(table).elements())
    except Exception as exc:  # noqa: BLE001
        out.error = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def read_rows(storage, combo) -> dict[str, Rows]:
    """Every reader's view of the table: ``independent``, ``library``, (Delta) ``delta-rs`` and
    (Iceberg) ``pyiceberg`` - by path, the version hint's metadata: a kill between the metadata
    file and the hint leaves it a batch behind until the roll-forward, like any pending batch."""
    from streaming_exactly_once import read
    from streaming_exactly_once.delta.engine import object_store_options
    from tests.delta.readback import delta_ids

    tables = list(combo.tables)
    uri = storage.root_uri.rstrip("/")
    opts = storage.options() or None

    def under(table: str, path: str) -> str:
        return f"{table}/{path}" if table else path

    def library(table: str) -> Counter:
        if not storage.list_dir(under(table, combo.manifest_dir)):
            return Counter()  # nothing committed yet
        found = read.arrow(under(uri, table), columns=["id"], storage_options=opts)
        return Counter(found.column("id").to_pylist())

    def delta(table: str) -> Counter:
        child = storage.child(table) if table else storage
        if not any(e.path.endswith(".json") for e in child.list_dir("_delta_log")):
            return Counter()
        return delta_ids(under(uri, table), storage_options=object_store_options(child) or None)

    def iceberg(table: str) -> Counter:
        from pyiceberg.table import StaticTable

        child = storage.child(table) if table else storage
        if not child.exists("metadata/version-hint.text"):
            return Counter()
        found = StaticTable.from_metadata(under(uri, table)).scan(selected_fields=("id",)).to_arrow()
        return Counter(found.column("id").to_pylist())

    out = {"independent": independent_rows(storage, combo.manifest_dirs()), "library": _each(tables, library)}
    if combo.delta:
        out["delta-rs"] = _each(tables, delta)
    if getattr(combo, "iceberg", False):
        out["pyiceberg"] = _each(tables, iceberg)
    return out


def recorded_batches(storage) -> set[int]:
    """Spark batch ids of the (single) query the commits log records (deltas and compacts); the
    batches ``seo compact`` commits (no rows, their own query id) are not the query's."""
    from streaming_exactly_once.maintenance.compact import MAINTENANCE_QUERY

    found: set[int] = set()
    for info in storage.list_dir("_seo/commits"):
        name = info.path.rsplit("/", 1)[-1]
        if not name[:1].isdigit():
            continue
        for line in storage.read_bytes(info.path).decode("utf-8", "replace").split("\n")[1:]:
            if line.startswith("{"):
                try:
                    record = json.loads(line)
                    if record["queryId"] != MAINTENANCE_QUERY:
                        found.add(record["sparkBatchId"])
                except (ValueError, KeyError):
                    continue  # a damaged record shows as a loss or an unexpected row
    return found


def judge(rows: Rows, committed: dict[int, list[int]], others: dict[int, list[int]], *, final: bool, tables: list[str] = ("",)) -> list[str]:
    """``committed``: batch -> ids that must be read exactly once; ``others``: batches attempted
    but not committed - all or nothing (nothing once ``final``, after the last recovery). A
    group's batch is split over its ``tables`` (``processes``: the i-th table gets every n-th
    row from the i-th), and each table publishes its share at its own manifest write: until a
    recovery completes the batch, all or nothing holds per table."""
    if rows.error:
        return [f"fails: {rows.error}"]
    out = []
    dup = {i: n for i, n in rows.ids.items() if n > 1}
    lost = [i for ids in committed.values() for i in ids if rows.ids[i] == 0]
    if dup:
        out.append(f"{len(dup)} ids read more than once, e.g. {sorted(dup)[:5]}")
    if lost:
        out.append(f"{len(lost)} committed ids missing, e.g. {sorted(lost)[:5]}")
    for b, ids in others.items():
        for t, table in enumerate(tables):
            share = ids[t :: len(tables)]
            seen = sum(1 for i in share if rows.ids[i])
            if seen and (final or seen != len(share)):
                where = f" in table {table}" if table else ""
                out.append(f"batch {b}, never committed, is {'visible' if final else 'partly visible'}{where} ({seen} of {len(share)} rows)")
    known = {i for ids in (*committed.values(), *others.values()) for i in ids}
    stray = set(rows.ids) - known
    if stray:
        out.append(f"{len(stray)} ids of no batch, e.g. {sorted(stray)[:5]}")
    if rows.missing_files:
        out.append(f"{len(rows.missing_files)} listed files missing, e.g. {rows.missing_files[:2]}")
    return out


def audit_problems(storage) -> list[str]:
    """The violations a full audit (from batch 0, no mark saved) finds, each with its table,
    check and message (batch, file or offsets); batches a pending claim completes are in flight,
    not violations."""
    from streaming_exactly_once.maintenance.audit import audit_table

    try:
        report = audit_table(storage, from_batch=0, record=False)
    except Exception as exc:  # noqa: BLE001 - a table the audit cannot read is the finding
        return [f"{type(exc).__name__}: {str(exc)[:300]}"]
    return [f"{table.rsplit('/', 1)[-1]} {v.check}: {v.message[:300]}" for table, v in report.all_violations()]


def seo(*args: str, storage_options: dict | None = None, timeout: float = 180.0) -> tuple[int, str]:
    """``seo --json [-o k=v ...] <args>`` in a process of its own; (exit code, output)."""
    opts = [f"-o{k}={v}" for k, v in (storage_options or {}).items() if isinstance(v, str)]
    cmd = [sys.executable, "-c", "from streaming_exactly_once.cli.main import main; main()", "--json", *opts, *args]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:.0f}s"
    return done.returncode, (done.stdout + done.stderr).strip()


def verify_problems(output: str) -> list[str]:
    """The problems of ``seo --json verify``'s report, in short."""
    try:
        report = json.loads(output)
    except ValueError:
        return [output[-300:]]
    return [f"{p['severity']} {p['kind']} {p['path'].rsplit('/', 2)[-2:]}: {p['detail'][:120]}" for p in report.get("problems", [])]


def snapshot(storage) -> dict[str, str]:
    """Every file of the tree and a digest of its bytes, the lease's own files aside."""
    return {
        info.path: hashlib.sha256(storage.read_bytes(info.path)).hexdigest() for info in storage.walk_files() if not info.path.startswith(LEASE_FILES)
    }


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    return [f"deleted {p}" for p in gone] + [f"created {p}" for p in new] + [f"rewrote {p}" for p in changed]
