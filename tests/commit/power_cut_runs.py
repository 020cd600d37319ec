"""Batches committed on a disk that loses power (``testing.power_cut``): after a failed fsync or
a power cut at a commit boundary, a restarted writer must find every acknowledged batch once.

A run, in this process with the commit helpers (``stage_and_commit``; ``commit_batch`` for
Delta; rename mode's staged files written as Spark writes them, without an fsync): Spark
batches 0-7 of one query, compact_interval 3 (compaction batches 2 and 5), retention as early
as it may go (min_batches_to_retain 1, no cleanup delay). Batch 3 fails right after its WAL
claim and is retried by the same writer (its recovery rolls the claim forward); compaction
batch 5 fails the same way, and a new writer (a new epoch) takes over and retries it (a claim
of an earlier epoch: rolled forward with a verdict). Any other failed batch
is retried as Spark retries it. The fault is one of:

* ``Eio`` - the n-th fsync of a path matching a pattern fails; the writer carries on and
  stops cleanly at the end, then the power is cut;
* ``Cut`` - the power is cut at a commit boundary (a ``faults`` spec): the durable state of that
  instant is what the restart finds; whatever the run did afterwards is lost.

Then a writer opens the table (it must), the rows are counted (every batch acknowledged before
the cut exactly once; any other batch all or nothing), every batch is run again as Spark would
re-run what its checkpoint does not hold (afterwards all of them exactly once), the writer
stops, and ``seo recover``, ``seo gc --older-than 0s``, ``seo verify`` run through the CLI:
verify must find nothing at all. ``RunResult.problems`` says what went wrong, in words.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import BOUNDARIES, BOUNDARY_RULES, FaultInjectingStorage, Rule, call_at, rules
from streaming_exactly_once.testing.power_cut import FsyncEvent, PowerCutDisk, PowerCutReport
from tests.commit.helpers import make_committer, stage_and_commit, visible_rows
from tests.delta.helpers import commit_batch, delta_committer

Q = "11111111-1111-1111-1111-111111111111"
BATCHES = 8
FAILING_BATCHES = (3, 5)  # each fails right after its WAL claim; its retry rolls it forward
NEW_WRITER_BATCH = 5  # a new writer (epoch) from the retry of this batch on
ATTEMPTS = 4


def rows_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 10))


@dataclass(frozen=True)
class TableKind:
    mode: str  # rename | direct
    delta: bool = False
    spark_manifest: bool = True
    #: compaction on: the batches before each compaction batch get their rewrites written in the
    #: background (drained after each batch, so each run is the same), the compaction batches publish them
    compacted: bool = False
    #: format="iceberg": "path" (the table's own metadata files) or "catalog" (a SQLite catalog
    #: beside the table, outside the disk that loses power: a catalog service keeps its pointer)
    iceberg: str | None = None

    @property
    def parquet(self) -> bool:
        """Whether its batches are Parquet files (``commit_batch``, with their schema): a Delta
        or Iceberg table's, and a compacted one's (only Parquet files are rewritten); else raw bytes."""
        return self.delta or self.compacted or self.iceberg is not None

    @property
    def name(self) -> str:
        formats = ("delta-" if self.delta else "") + (f"iceberg-{self.iceberg}-" if self.iceberg else "")
        return f"{formats}{'' if self.spark_manifest else 'private-'}{self.mode}{'-compacted' if self.compacted else ''}"


@dataclass(frozen=True)
class Eio:
    pattern: str
    kind: str = "file"  # file | dir
    nth: int = 1


@dataclass(frozen=True)
class Cut:
    spec: str  # <boundary>@<n>


@dataclass
class RunResult:
    acked: set[int] = field(default_factory=set)
    events: list[FsyncEvent] = field(default_factory=list)
    firings: list[tuple[str, int]] = field(default_factory=list)  # (boundary, Spark batch) in order
    batch_starts: list[int] = field(default_factory=list)  # how many fsyncs came before each batch
    injected: bool = False
    cut: PowerCutReport | None = None
    problems: list[str] = field(default_factory=list)


#: every file of a run is small and old enough; two batches' files are worth a rewrite
POLICY = CompactionPolicy(target_size=1 << 20, min_files=3, min_age_ms=0, max_bytes=1 << 20)


def _catalog(root: Path) -> tuple[str, dict[str, str]]:
    """The SQLite catalog of an ``iceberg="catalog"`` run: (name, properties), beside ``root``."""
    real = Path(os.path.realpath(root))
    return f"pc{zlib.crc32(str(real).encode())}", {"type": "sql", "uri": f"sqlite:///{real.parent}/{real.name}.catalog.db"}


def _committer(storage, kind: TableKind):
    opts: dict = {"compact_interval": 3, "min_batches_to_retain": 1, "cleanup_delay_ms": 0}
    if kind.compacted:
        opts["compaction"] = POLICY
    if kind.iceberg is not None:
        from streaming_exactly_once.iceberg.settings import IcebergCatalogRef
        from tests.iceberg.table_helpers import iceberg_committer

        if kind.iceberg == "catalog":
            name, props = _catalog(Path(storage.root_uri.removeprefix("file://")))
            opts["iceberg_catalog"] = IcebergCatalogRef(name, "db.events")
            opts["iceberg_catalog_properties"] = tuple(sorted(props.items()))
        return iceberg_committer(storage, delta=kind.delta, spark_manifest=kind.spark_manifest, **opts)
    if kind.delta:
        return delta_committer(storage, spark_manifest=kind.spark_manifest, checkpoint_interval=3, **opts)
    return make_committer(storage, **opts)


def _commit(committer, kind: TableKind, batch: int):
    if kind.parquet:
        # rename mode: the staged files synced as the sink's writer reads their rows (one open),
        # where a plain table's (raw bytes, no rows to read) are synced by the commit
        result = commit_batch(committer, Q, batch, rows_of(batch), mode=kind.mode, spark_staging=True, read_as_sink=True)
    else:
        result = stage_and_commit(committer, Q, batch, rows_of(batch), mode=kind.mode, spark_staging=True)
    if kind.compacted:
        committer.janitor.drain()
    return result


def _recording_rules(firings: list[tuple[str, int]], batch: list[int]) -> list[Rule]:
    """A rule per boundary and occurrence (up to 24) that notes where the run is."""
    out = []
    for name in BOUNDARIES:
        for n in range(1, 25):
            out.append(call_at(f"{name}@{n}", lambda name=name: firings.append((name, batch[0]))))
    return out


def run(root: Path, kind: TableKind, fault: Eio | Cut | None = None, *, record: bool = False) -> RunResult:
    result = RunResult()
    root.mkdir(parents=True, exist_ok=True)
    with PowerCutDisk(root) as disk, _catalog_configured(root, kind):
        base = FaultInjectingStorage(open_storage(str(root)))
        outer = FaultInjectingStorage(base)  # the failing batch's own rule
        batch = [0]
        image: list = []
        acked: set[int] = set()

        def cut_here() -> None:
            if not image:
                image.append((disk.image(), set(acked), _catalog_bytes(root, kind)))

        if isinstance(fault, Cut):
            base.arm([call_at(fault.spec, cut_here)])
        elif record:
            base.arm(_recording_rules(result.firings, batch))
        if isinstance(fault, Eio):
            disk.fail_fsync(fault.pattern, nth=fault.nth, kind=fault.kind)
        committer = _committer(outer, kind)
        for b in range(BATCHES):
            batch[0] = b
            result.batch_starts.append(len(disk.events))
            outer.arm(rules(fail_at="after-wal") if b in FAILING_BATCHES else [])
            for attempt in range(ATTEMPTS):
                if b == NEW_WRITER_BATCH and attempt == 1:
                    _close(committer)
                    committer = _committer(outer, kind)
                try:
                    _commit(committer, kind, b)
                except Exception:  # noqa: BLE001 - retried, as Spark retries a failed batch
                    continue
                acked.add(b)
                break
            else:
                break  # the query stops
        outer.arm([])
        _close(committer)
        result.events = list(disk.events)
        result.injected = bool(disk.failed) if isinstance(fault, Eio) else bool(image) if isinstance(fault, Cut) else True
        if isinstance(fault, Cut) and not image:
            result.problems.append(f"the run never reached {fault.spec}")
            return result
        cut_image, result.acked, catalog = image[0] if image else (None, set(acked), None)
        result.cut = disk.power_cut(cut_image)
        if catalog is not None:  # the catalog service, as it was at that instant
            Path(_catalog(root)[1]["uri"].removeprefix("sqlite:///")).write_bytes(catalog)
        _restart_and_check(root, kind, result)
    return result


@contextlib.contextmanager
def _catalog_configured(root: Path, kind: TableKind):
    """An ``iceberg="catalog"`` run's catalog, created, and configured for the ``seo`` commands
    (pyiceberg's ``PYICEBERG_CATALOG__<NAME>__*``) while the run lasts."""
    if kind.iceberg != "catalog":
        yield
        return
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    name, props = _catalog(root)
    pyiceberg.catalog.load_catalog(name, **props).create_tables()
    env = {f"PYICEBERG_CATALOG__{name.upper()}__{k.upper()}": v for k, v in props.items()}
    os.environ.update(env)
    before = pyiceberg.catalog._ENV_CONFIG
    pyiceberg.catalog._ENV_CONFIG = Config()  # read at import: as a new `seo` process would read it
    try:
        yield
    finally:
        for key in env:
            os.environ.pop(key, None)
        pyiceberg.catalog._ENV_CONFIG = before


def _catalog_bytes(root: Path, kind: TableKind) -> bytes | None:
    """The catalog's database now (each of its commits is durable): a power cut "at this
    instant" finds the catalog's pointer as it was then, not as the rest of the run left it."""
    return Path(_catalog(root)[1]["uri"].removeprefix("sqlite:///")).read_bytes() if kind.iceberg == "catalog" else None


def _iceberg_ids(root: Path, kind: TableKind) -> Counter:
    """Row ids as pyiceberg reads the table: by path (its version hint), or through the catalog."""
    if kind.iceberg == "catalog":
        from pyiceberg.catalog import load_catalog

        name, props = _catalog(root)
        table = load_catalog(name, **props).load_table("db.events")
        return Counter(table.scan().to_arrow().column("id").to_pylist())
    from tests.iceberg.table_helpers import pyiceberg_ids

    return pyiceberg_ids(root)


def _close(committer) -> None:
    with contextlib.suppress(Exception):  # a writer whose disk failed may fail to stop cleanly
        committer.close()


def _read(root: Path, kind: TableKind) -> dict[str, Counter | str]:
    from streaming_exactly_once import read
    from tests.delta.readback import delta_ids

    readers = {"manifest": lambda: Counter(visible_rows(open_storage(str(root))))}
    if kind.parquet:
        readers = {"manifest": lambda: Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist())}
    if kind.delta:
        readers["delta-rs"] = lambda: delta_ids(root)
    if kind.iceberg is not None:
        readers["pyiceberg"] = lambda: _iceberg_ids(root, kind)
    out: dict[str, Counter | str] = {}
    for name, fn in readers.items():
        try:
            out[name] = fn()
        except Exception as exc:  # noqa: BLE001 - a reader that fails is the finding
            out[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def _judge(root: Path, kind: TableKind, acked: set[int], when: str) -> list[str]:
    problems = []
    every = {i for b in range(BATCHES) for i in rows_of(b)}
    for reader, got in _read(root, kind).items():
        if isinstance(got, str):
            problems.append(f"{when}: the {reader} reader fails: {got}")
            continue
        for b in range(BATCHES):
            times = sorted({got[i] for i in rows_of(b)})
            if b in acked and times != [1]:
                problems.append(f"{when}: acknowledged batch {b} is read {times} times by the {reader} reader")
            elif b not in acked and times not in ([0], [1]):
                problems.append(f"{when}: unacknowledged batch {b} is partly visible ({times} times) to the {reader} reader")
        if set(got) - every:
            problems.append(f"{when}: the {reader} reader sees ids of no batch: {sorted(set(got) - every)[:5]}")
    return problems


def _restart_and_check(root: Path, kind: TableKind, result: RunResult) -> None:
    committer = _committer(open_storage(str(root)), kind)
    committer.lease.clock = lambda: time.time() + 3600  # the machine was down: the old lease has expired
    try:
        committer.open()
    except Exception as exc:  # noqa: BLE001
        result.problems.append(f"the table does not open after the power cut: {type(exc).__name__}: {str(exc)[:300]}")
        return
    result.problems += _judge(root, kind, result.acked, "after the power cut")
    for b in range(BATCHES):  # Spark re-runs what its checkpoint does not hold
        try:
            _commit(committer, kind, b)
        except Exception as exc:  # noqa: BLE001
            result.problems.append(f"batch {b} cannot be committed after the power cut: {type(exc).__name__}: {str(exc)[:200]}")
    _close(committer)
    result.problems += _judge(root, kind, set(range(BATCHES)), "after every batch ran again")
    for args in (["recover"], ["gc", "--older-than", "0s"]):
        code, out = seo(*args, str(root))
        if code != 0:
            result.problems.append(f"seo {args[0]} exits {code}: {out[-300:]}")
    code, out = seo("--json", "verify", str(root))
    try:
        found = [f"{p['severity']} {p['kind']} {p['path'].rsplit('/', 3)[-1]}" for p in json.loads(out)["problems"]]
    except (ValueError, KeyError):
        found = [out[-300:]]
    if code != 0 or found:
        result.problems.append(f"seo verify exits {code}: {found[:4]}")


_cli_lock = threading.Lock()


def seo(*args: str) -> tuple[int, str]:
    """The ``seo`` command's entry point in this process; (exit code, stdout + stderr)."""
    from streaming_exactly_once.cli.main import main

    buf = io.StringIO()
    code = 0
    with _cli_lock, contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, buf.getvalue()


def boundary_cut(firings: list[tuple[str, int]], boundary: str, batch: int) -> Cut | None:
    """A cut at ``boundary``'s first firing in ``batch`` or, for one the janitor reaches in the
    background (its passes coalesce), the first after it."""
    seen = 0
    for name, b in firings:
        if name == boundary:
            seen += 1
            if b >= batch:
                return Cut(f"{name}@{seen}")
    return None


assert set(BOUNDARY_RULES) == set(BOUNDARIES)
