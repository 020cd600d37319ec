"""Zombie torture at the commit layer (no Spark): hundreds of frozen-writer takeovers in minutes.

    python -m tests.torture.zombie_run --runs 200 --seed 7 [--jobs 2] [--lease-ms 600]
        [--kind table-rename|table-direct|group] [--boundary after-manifest] [--work DIR] [--keep] [--out FILE]

Each run, in real processes (``tests.commit.processes``):

1. writer **A** commits a few batches and freezes itself (``pause_at``: SIGSTOP) at one commit
   boundary of ``testing.faults`` in its next batch - a single table in ``rename`` or ``direct``
   staging mode, or a dataset group (``GroupCommitter``, several tables per batch);
2. once A's lease has expired, successor **B** opens the table and commits batches
   (``compact_interval`` 2-4) - in about half of the runs through a compaction before A wakes,
   in the others the first compaction follows A's wake-up (the window in which a zombie's
   background compaction preparation can interfere); B keeps its lease, idle or committing;
3. A is resumed with SIGCONT and tries its in-flight batch and the next ones, retrying a failed
   one as Spark would: it must be fenced (``WriterFencedError``), except that it may finish a
   batch it had claimed (WAL written) before the takeover - that batch then counts once;
4. B commits at least one more compaction's worth of batches and stops cleanly - or dies
   (SIGKILL while idle, or at a random boundary of its own) and a third writer **C** recovers
   the table and commits as many;
5. a fresh writer opens the table (what the next start does; it must succeed), then an
   independent check - ``_spark_metadata`` parsed with ``json``, every listed file read with
   pyarrow (``tests.commit.readback``) - counts every row: each row of a batch any writer
   reported committed or the commits log records appears exactly once, no other row appears,
   no listed file is missing.

Everything a run does follows from its seed (which boundary: ``seed % 33`` cycles through
every boundary of the three kinds; the rest from ``random.Random(seed)``), except the
interleaving of a busy successor with the zombie's wake-up. Runs use seeds ``S, S+1, ...``; a
failure prints the command that replays it alone. The JSON summary on stdout counts runs,
duplicates and losses per boundary; the exit code is 1 if any run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from streaming_exactly_once.testing.faults import BOUNDARIES, COMPACTION_ONLY, DELTA_ONLY, GROUP_ONLY, ICEBERG_ONLY, SCHEMA_ONLY
from tests.commit.processes import QA, QB, QC, Writer, batch_rows, stop_all
from tests.commit.readback import committed_ids, judge, read_table, read_tables, recorded_batches

TABLE_RENAME = [b for b in BOUNDARIES if b not in ("after-cleanup", *GROUP_ONLY, *DELTA_ONLY, *ICEBERG_ONLY, *SCHEMA_ONLY, *COMPACTION_ONLY)]
TABLE_DIRECT = [b for b in BOUNDARIES if b not in ("mid-move", "after-move", *GROUP_ONLY, *DELTA_ONLY, *ICEBERG_ONLY, *SCHEMA_ONLY, *COMPACTION_ONLY)]
GROUP = [b for b in BOUNDARIES if b not in ("after-manifest", "after-cleanup", *DELTA_ONLY, *ICEBERG_ONLY, *SCHEMA_ONLY, *COMPACTION_ONLY)]
BOUNDARIES_OF = {"table-rename": TABLE_RENAME, "table-direct": TABLE_DIRECT, "group": GROUP}
PAIRS = [(kind, b) for kind, bs in BOUNDARIES_OF.items() for b in bs]
#: Boundaries at which the frozen batch is already claimed (its WAL entry written before the
#: takeover): the zombie may complete that batch. Before them it must not publish it.
CLAIMED = {
    "after-wal",
    "mid-move",
    "after-move",
    "after-manifest",
    "after-sources",
    "after-commit",
    "after-cleanup",
    "after-records-sync",
    "after-wal-delete",
    "mid-members",
    "after-members",
}
BASES = {QA: 0, QB: 1_000_000, QC: 2_000_000}


@dataclass
class Scenario:
    seed: int
    kind: str
    boundary: str
    interval: int
    rows: int
    files: int
    tables: list[str]
    a_mode: str
    a_before: int  # batches A commits before the one it freezes in
    a_drain: bool  # A's batches spaced out: its background preparation keeps up
    a_tries: int  # attempts after the freeze (in-flight batch included)
    b_mode: str
    b_before: int  # batches B commits while A is frozen
    b_busy: bool  # B keeps committing while A wakes up (else idle)
    b_after: int  # batches B (or C) commits after A has stopped
    b_dies: str | None  # None, "idle" (SIGKILL while idle) or the boundary B crashes at
    lease_ms: int

    @classmethod
    def from_seed(cls, seed: int, *, lease_ms: int = 600) -> Scenario:
        rng = random.Random(seed)
        kind, boundary = PAIRS[seed % len(PAIRS)]
        k = rng.choice([2, 3, 4])
        group = kind == "group"
        a_mode = "direct" if kind == "table-direct" else "rename"
        b_mode = "rename" if group else (a_mode if rng.random() < 0.7 else rng.choice(["rename", "direct"]))
        b_dies = None
        if rng.random() < 0.35:
            b_boundaries = GROUP if group else (TABLE_RENAME if b_mode == "rename" else TABLE_DIRECT)
            b_dies = "idle" if rng.random() < 0.4 else rng.choice(b_boundaries)
        return cls(
            seed=seed,
            kind=kind,
            boundary=boundary,
            interval=k,
            rows=rng.randint(4, 6),
            files=rng.randint(2, 3),
            tables=[f"t{i}" for i in range(rng.choice([2, 3]))] if group else [],
            a_mode=a_mode,
            a_before=rng.randint(1, 2 * k + 1),
            a_drain=rng.random() < 0.7,
            a_tries=rng.choice([2, 3]),
            b_mode=b_mode,
            b_before=rng.randint(k, 2 * k) if rng.random() < 0.5 else rng.randint(0, k - 1),
            b_busy=rng.random() < 0.3,
            b_after=rng.randint(k, k + 1),
            b_dies=b_dies,
            lease_ms=lease_ms,
        )

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.boundary}"

    def rows_of(self, query: str, spark_batch: int) -> list[int]:
        return batch_rows(BASES[query], spark_batch, self.rows)


@dataclass
class RunResult:
    seed: int
    key: str
    scenario: dict
    duplicates: int = 0
    losses: int = 0
    missing_files: int = 0
    unexpected: int = 0
    successor_compacted_before_wake: bool | None = None
    zombie: list[str] = field(default_factory=list)
    successor: list[str] = field(default_factory=list)
    reopen: str | None = None
    problems: list[str] = field(default_factory=list)
    harness: str | None = None
    wall_s: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(
            self.duplicates
            or self.losses
            or self.missing_files
            or self.unexpected
            or self.zombie
            or self.successor
            or self.reopen
            or self.problems
            or self.harness
        )


# -- one run -------------------------------------------------------------------------------------


def _commits(sc: Scenario, query: str, count: int, mode: str, **kw) -> dict:
    return {"do": "commits", "query": query, "count": count, "base": BASES[query], "rows": sc.rows, "files": sc.files, "mode": mode, **kw}


def _program(sc: Scenario, name: str, root: Path, steps: list[dict]) -> dict:
    return {
        "name": name,
        "root": str(root),
        "group": sc.tables or None,
        "steps": steps,
        "options": {"lease_timeout_ms": sc.lease_ms, "compact_interval": sc.interval},
    }


def _compacts(sc: Scenario, root: Path) -> set[str]:
    dirs = [root / t / "_spark_metadata" for t in sc.tables] if sc.tables else [root / "_spark_metadata"]
    return {f"{d.parent.name}/{n}" for d in dirs if d.is_dir() for n in os.listdir(d) if n.endswith(".compact")}


def _reopen(sc: Scenario, root: Path) -> str | None:
    """The next start of a writer: take the lease and recover. None if it works."""
    from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter
    from streaming_exactly_once.storage import open_storage

    cls = GroupCommitter if sc.tables else TableCommitter
    c = cls(open_storage(str(root)), CommitterOptions(heartbeat=False, lease_timeout_ms=sc.lease_ms, compact_interval=sc.interval))
    try:
        c.open()
    except Exception as exc:  # noqa: BLE001 - reported as the run's finding
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        c.janitor.drain()
        c.lease.release()
    return None


def _judge_zombie(sc: Scenario, a: Writer, armed_step: int, *, before_wake: int = 0) -> list[str]:
    """``before_wake``: how many of A's commit events it had written when it was frozen. A pause
    on the janitor's thread (after-records-sync, after-wal-delete) freezes A wherever its
    batches are: they can have committed the next batch before it, while A held the lease."""
    out = []
    attempts = [e for e in a.commits()[before_wake:] if e["step"] == armed_step]
    if not attempts and not any(e["step"] == armed_step for e in a.commits()[:before_wake]):
        return [f"A made no attempt after waking up (rc {a.proc.returncode})"]
    for i, e in enumerate(attempts):
        what = f"A's {'in-flight batch' if i == 0 else f'attempt {i} after waking up'} ({e['query'][:4]}/{e['batch']})"
        if e["status"] == "committed":
            if i == 0 and sc.boundary in CLAIMED:
                continue  # claimed before the takeover: it may finish it
            out.append(f"{what} committed as manifest batch {e['manifestBatch']} after the takeover")
        elif e["status"] != "error" or e["error"] != "WriterFencedError":
            out.append(f"{what}: {e['status']} {e.get('error', '')}: {e.get('message', '')[:200]}")
    for e in a.events("error"):
        out.append(f"A's step {e['step']} failed: {e['error']}: {e['message'][:200]}")
    return out


def _errors(w: Writer) -> list[str]:
    return [
        f"{w.name} {e.get('step')}: {e['error']}: {e['message'][:240]}" for e in w.events() if e.get("event") == "error" or e.get("status") == "error"
    ]


def run_scenario(sc: Scenario, work: Path) -> RunResult:
    t0 = time.time()
    result = RunResult(seed=sc.seed, key=sc.key, scenario=asdict(sc))
    root = work / "t"
    a_done, b_ready, b_idle = work / "a-done", work / "b-ready", work / "b-idle"
    writers: list[Writer] = []
    try:
        # 1. A commits, then freezes at the boundary
        a_steps = [{"do": "open"}]
        a_steps.append(_commits(sc, QA, sc.a_before, sc.a_mode, drain=sc.a_drain))
        armed_step = len(a_steps)
        a_steps += [_commits(sc, QA, sc.a_tries, sc.a_mode, pause_at=sc.boundary, drain=sc.a_drain), {"do": "drain"}, {"do": "close"}]
        a = Writer(_program(sc, "A", root, a_steps))
        writers.append(a)
        a.wait_stopped(30)
        frozen_compacts = _compacts(sc, root)
        time.sleep(sc.lease_ms / 1000 + 0.25)
        # 2. B takes over
        b_steps = [{"do": "open", "retry_s": 10}]
        if sc.b_before:
            b_steps.append(_commits(sc, QB, sc.b_before, sc.b_mode))
        b_steps.append({"do": "touch", "path": str(b_ready)})
        if sc.b_busy:
            b_steps.append(_commits(sc, QB, 0, sc.b_mode, until=str(a_done), sleep_s=0.02))
        else:
            b_steps.append({"do": "wait", "path": str(a_done)})
        if sc.b_dies == "idle":
            b_steps += [{"do": "touch", "path": str(b_idle)}, {"do": "hang"}]
        else:
            b_steps += [_commits(sc, QB, sc.b_after, sc.b_mode, crash_at=sc.b_dies), {"do": "close"}]
        b = Writer(_program(sc, "B", root, b_steps))
        writers.append(b)
        b.wait_for(b_ready.exists, "its batches before the zombie wakes up", 60)
        result.successor_compacted_before_wake = bool(_compacts(sc, root) - frozen_compacts)
        # 3. A wakes up while B holds the lease (what it wrote before it froze is long read)
        before_wake = len(a.commits())
        a.resume()
        rc_a = a.wait(60)
        a_done.touch()
        result.zombie = _judge_zombie(sc, a, armed_step, before_wake=before_wake)
        if rc_a not in (0, 1):
            result.zombie.append(f"A ended with rc {rc_a}\n{a.output(1500)}")
        # 4. B finishes, or dies and C finishes
        if sc.b_dies == "idle":
            b.wait_for(b_idle.exists, "its idle point", 60)
            b.kill()
        else:
            rc_b = b.wait(60)
            if rc_b != (-9 if sc.b_dies else 0):
                result.successor.append(f"B ended with rc {rc_b} (expected {-9 if sc.b_dies else 0})")
        result.successor += _errors(b)
        if sc.b_dies:
            c = Writer(_program(sc, "C", root, [{"do": "open", "retry_s": 10}, _commits(sc, QC, sc.b_after, sc.b_mode), {"do": "close"}]))
            writers.append(c)
            if c.wait(60) != 0:
                result.successor.append(f"C ended with rc {c.proc.returncode}")
            result.successor += _errors(c)
        # 5. the next start, then what readers see
        result.reopen = _reopen(sc, root)
        readout = read_tables([root / t for t in sc.tables]) if sc.tables else read_table(root)
        committed = committed_ids([e for w in writers for e in w.events()], recorded_batches(root), sc.rows_of)
        verdict = judge(readout, committed)
        result.duplicates = len(verdict.duplicates)
        result.losses = len(verdict.losses)
        result.missing_files = len(verdict.missing_files)
        result.unexpected = len(verdict.unexpected)
        result.problems = verdict.problems[:3]
        if not verdict.ok:
            result.problems.append(verdict.describe())
    except AssertionError as exc:  # a process did not reach a point it must reach
        result.harness = str(exc)[:3000]
    finally:
        stop_all(writers)
    result.wall_s = round(time.time() - t0, 2)
    return result


# -- many runs -----------------------------------------------------------------------------------


def seeds_for(runs: int, seed: int, kind: str | None = None, boundary: str | None = None) -> list[int]:
    out, s = [], seed
    while len(out) < runs:
        k, b = PAIRS[s % len(PAIRS)]
        if (kind is None or k == kind) and (boundary is None or b == boundary):
            out.append(s)
        s += 1
        if s - seed > 1_000_000:
            raise ValueError(f"no boundary matches kind={kind} boundary={boundary}")
    return out


def run_many(
    *, runs: int, seed: int, work: Path, jobs: int = 1, lease_ms: int = 600, kind: str | None = None, boundary: str | None = None, log=None
) -> dict:
    t0 = time.time()
    seeds = seeds_for(runs, seed, kind, boundary)
    results: list[RunResult] = []
    lock = threading.Lock()

    def one(s: int) -> RunResult:
        sc = Scenario.from_seed(s, lease_ms=lease_ms)
        r = run_scenario(sc, work / f"run-{s}")
        with lock:
            results.append(r)
            if log is not None:
                verdict = "FAILED " + "; ".join(_what(r))[:300] if r.failed else "ok"
                log(f"[zombie {len(results)}/{len(seeds)} seed {s} {sc.key} {r.wall_s:.1f}s] {verdict}")
        return r

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, seeds))
    return summarize(results, seed=seed, wall_s=time.time() - t0)


def _what(r: RunResult) -> list[str]:
    out = []
    for name in ("duplicates", "losses", "missing_files", "unexpected"):
        if getattr(r, name):
            out.append(f"{name} {getattr(r, name)}")
    out += [f"zombie: {z}" for z in r.zombie] + [f"successor: {s}" for s in r.successor]
    if r.reopen:
        out.append(f"reopen: {r.reopen}")
    out += [f"readback: {p}" for p in r.problems]
    if r.harness:
        out.append(f"harness: {r.harness}")
    return list(dict.fromkeys(out))  # a retried batch repeats its error


def summarize(results: list[RunResult], *, seed: int, wall_s: float) -> dict:
    per: dict[str, dict] = {}
    for kind, b in PAIRS:
        per[f"{kind}:{b}"] = {
            "runs": 0,
            "failed": 0,
            "duplicates": 0,
            "losses": 0,
            "missing_files": 0,
            "unexpected": 0,
            "zombie_not_fenced": 0,
            "successor_failed": 0,
            "reopen_failed": 0,
            "harness": 0,
        }
    for r in results:
        p = per[r.key]
        p["runs"] += 1
        p["failed"] += r.failed
        for name in ("duplicates", "losses", "missing_files", "unexpected"):
            p[name] += getattr(r, name)
        p["zombie_not_fenced"] += bool(r.zombie)
        p["successor_failed"] += bool(r.successor)
        p["reopen_failed"] += bool(r.reopen)
        p["harness"] += bool(r.harness)
    failures = [
        {
            "seed": r.seed,
            "key": r.key,
            "what": _what(r),
            "scenario": {k: v for k, v in r.scenario.items() if k not in ("seed", "kind", "boundary")},
            "successor_compacted_before_wake": r.successor_compacted_before_wake,
            "replay": f"python -m tests.torture.zombie_run --runs 1 --seed {r.seed}",
        }
        for r in sorted(results, key=lambda r: r.seed)
        if r.failed
    ]
    return {
        "runs": len(results),
        "seed": seed,
        "failed_runs": len(failures),
        "duplicates": sum(r.duplicates for r in results),
        "losses": sum(r.losses for r in results),
        "missing_files": sum(r.missing_files for r in results),
        "unexpected": sum(r.unexpected for r in results),
        "wall_s": round(wall_s, 1),
        "run_s_median": sorted(r.wall_s for r in results)[len(results) // 2] if results else None,
        "per_boundary": {k: {n: c for n, c in v.items() if c or n in ("runs", "failed")} for k, v in per.items() if v["runs"]},
        "failures": failures,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each is a few mostly sleeping processes)")
    p.add_argument("--lease-ms", type=int, default=600)
    p.add_argument("--kind", choices=sorted(BOUNDARIES_OF), default=None)
    p.add_argument("--boundary", choices=BOUNDARIES, default=None)
    p.add_argument("--work", default=None)
    p.add_argument("--keep", action="store_true", help="keep the tables (always kept with --work)")
    p.add_argument("--out", default=None, help="also write the summary JSON here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="seo-zombie-"))
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        summary = run_many(
            runs=args.runs, seed=args.seed, work=work, jobs=args.jobs, lease_ms=args.lease_ms, kind=args.kind, boundary=args.boundary, log=log
        )
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 1 if summary["failed_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())
