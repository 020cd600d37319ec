"""Where a tiny batch's time goes in the sink: CPU and wall time per phase, per batch.

One real Spark ``availableNow`` query writes the 10,000-batch benchmark's batches (one 40-row CSV
file a trigger, ``partition_by=["p"]``: four tiny Parquet files a batch, rename mode) through
``ExactlyOnceSink``. Each phase of the ``foreachBatch`` call is timed by a wrapper: wall time,
CPU time of the whole Python process (``process_time``: every thread, the commit's I/O pools
too) and CPU time of the thread Spark calls the sink in (``thread_time``). A loaded machine
stretches wall time; CPU time is what the sink's own work costs, and moves less with the load
(the load average is recorded beside each run). Phases nest: ``write`` holds ``spark save``
(Spark's write job, which every writer pays) and ``footers``; ``commit`` holds its steps.

    python -m benchmarks.bench_tiny_cost LABEL [--batches 300] [--code DIR] [--out FILE]

``--code DIR`` measures the library in another checkout (a before/after pair on the same
machine, run one after the other); each run is added to ``FILE`` under ``LABEL``
(``benchmarks/results/tiny_cost.json``), and ``section`` renders the runs for
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULT = Path("benchmarks/results/tiny_cost.json")
WARM_UP = 20  # batches left out: the JVM's and the interpreter's first batches

#: (where, phase): what is timed; a place the measured code does not have is left out
PHASES = (
    ("streaming_exactly_once.sink.batch_sink:BatchSink._identity", "prepare: query identity"),
    ("streaming_exactly_once.sink.batch_sink:BatchSink._adopt_batch_query", "prepare: query run"),
    ("streaming_exactly_once.sink.batch_sink:BatchSink._check_columns", "prepare: batch columns (schema from the JVM)"),
    ("streaming_exactly_once.sink.exactly_once_sink:ExactlyOnceSink._fit_schema", "prepare: schema fit"),
    ("streaming_exactly_once.checkpoint.reader:SparkCheckpoint.offsets", "prepare: checkpoint offsets"),
    ("streaming_exactly_once.checkpoint.reader:SparkCheckpoint.input_files", "prepare: checkpoint input files"),
    ("streaming_exactly_once.sink.batch_sink:guard_batch", "prepare: offset guard"),
    ("streaming_exactly_once.commit.writer:Writer.begin", "prepare: intent"),
    ("streaming_exactly_once.sink.exactly_once_sink:ExactlyOnceSink._stage_and_commit", "write + commit"),
    ("pyspark.sql.readwriter:DataFrameWriter.save", "write: spark save"),
    ("streaming_exactly_once.sink.rename_writer:staged_rows", "write: footers"),
    ("streaming_exactly_once.sink.rename_writer:read_staged", "write: footers"),
    ("streaming_exactly_once.commit.committer:TableCommitter.commit", "commit"),
    ("streaming_exactly_once.commit.committer:TableCommitter._plan", "commit: plan"),
    ("streaming_exactly_once.commit.committer:batch_ledger", "commit: ledger build"),
    ("streaming_exactly_once.commit.protocol.engine:CommitEngine._sync_staged", "commit: sync staged"),
    ("streaming_exactly_once.commit.protocol.engine:CommitEngine.claim", "commit: WAL claim"),
    ("streaming_exactly_once.commit.protocol.sequence:CommitSequence.run", "commit: steps"),
    ("streaming_exactly_once.commit.committer:TableCommitter._finish", "commit: finish"),
)


class Clock:
    """Per-batch sums of each phase's (wall, process CPU, thread CPU), in the calling thread only."""

    def __init__(self) -> None:
        self.caller: threading.Thread | None = None
        self.batch: dict[str, list[float]] = {}
        self.batches: list[dict[str, list[float]]] = []

    def timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not self.caller:
                return fn(*args, **kwargs)
            t, c, tt = time.perf_counter(), time.process_time(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                sums = self.batch.setdefault(phase, [0.0, 0.0, 0.0])
                sums[0] += time.perf_counter() - t
                sums[1] += time.process_time() - c
                sums[2] += time.thread_time() - tt

        return wrapper

    def count(self, what: str) -> None:
        if threading.current_thread() is self.caller:
            self.batch.setdefault(what, [0.0, 0.0, 0.0])[0] += 0.001  # shown as "wall ms": one per call


def _patch(clock: Clock, where: str, phase: str) -> None:
    module, _, attr = where.partition(":")
    owner: Any = importlib.import_module(module)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    if hasattr(owner, name):
        setattr(owner, name, clock.timed(phase, getattr(owner, name)))


def _count_round_trips(clock: Clock) -> None:
    """Count two things the cuts are about: Spark local-property look-ups, checkpoint offsets reads."""
    from pyspark.core.context import SparkContext

    from streaming_exactly_once.checkpoint.offset_seq import OffsetSeqLog

    for owner, name, what in ((SparkContext, "getLocalProperty", "calls: getLocalProperty"), (OffsetSeqLog, "offsets", "calls: offsets file read")):
        original = getattr(owner, name)

        def counted(*args: Any, _original: Callable[..., Any] = original, _what: str = what) -> Any:
            clock.count(_what)
            return _original(*args)

        setattr(owner, name, counted)


def run(batches: int, work: Path) -> dict[str, Any]:
    from streaming_exactly_once import ExactlyOnceSink

    from .bench_compaction import SCHEMA, _input
    from .spark_env import spark_session

    clock = Clock()
    for where, phase in PHASES:
        _patch(clock, where, phase)
    _count_round_trips(clock)

    class TimedSink(ExactlyOnceSink):
        def __call__(self, df: Any, batch_id: int) -> None:
            clock.caller, clock.batch = threading.current_thread(), {}
            t, c, tt = time.perf_counter(), time.process_time(), time.thread_time()
            try:
                super().__call__(df, batch_id)
            finally:
                clock.batch["call"] = [time.perf_counter() - t, time.process_time() - c, time.thread_time() - tt]
                clock.batches.append(clock.batch)

    _input(work / "input", batches, 40)
    spark = spark_session("seo-bench-tiny-cost")
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).csv(str(work / "input"))
    sink = TimedSink(str(work / "out"), partition_by=["p"])
    write = sink.writer.write
    sink.writer.write = clock.timed("write", write)  # type: ignore[method-assign]
    load_before = os.getloadavg()
    sink.start(stream, checkpoint_location=str(work / "ckpt"), trigger={"availableNow": True}).awaitTermination()
    load_after = os.getloadavg()
    sink.close()
    spark.stop()
    return {"batches": len(clock.batches), "load": [load_before, load_after], "phases": _means(clock.batches[WARM_UP:])}


def _means(batches: list[dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Per phase: mean ms per batch of wall, process CPU and thread CPU (0 in a batch without it)."""
    phases = sorted({p for b in batches for p in b})
    out = {}
    for phase in phases:
        cols = list(zip(*(b.get(phase, [0.0, 0.0, 0.0]) for b in batches), strict=True))
        out[phase] = {k: round(1000 * statistics.mean(v), 3) for k, v in zip(("wall", "cpu", "thread_cpu"), cols, strict=True)}
    call, save = out["call"], out.get("write: spark save", {"wall": 0.0, "cpu": 0.0, "thread_cpu": 0.0})
    out["sink's own (call - spark save)"] = {k: round(call[k] - save[k], 3) for k in call}
    return out


def _order(phase: str) -> tuple[int, str]:
    """Phases in the order a batch runs them: the whole call first, counts last."""
    for rank, prefix in enumerate(("call", "sink's own", "prepare", "write + commit", "write", "commit", "calls")):
        if phase.startswith(prefix):
            return rank, "" if phase == prefix else phase
    return 99, phase


def section(path: Path = RESULT) -> list[str]:
    """The runs of ``path`` side by side, for ``docs/benchmarks.md``."""
    if not path.exists():
        return []
    runs = json.loads(path.read_text())["runs"]
    phases = sorted((p for p in runs[-1]["phases"] if not p.startswith("calls:")), key=_order)
    head = " | ".join(f"{r['label']}: CPU / thread CPU / wall" for r in runs)
    md = [
        "## Tiny batches: where a batch's time goes in the sink",
        "",
        "`python -m benchmarks.bench_tiny_cost LABEL --batches N` (four tiny Parquet files a batch, rename mode, one real "
        "Spark query; means per batch in ms after the first 20 batches). CPU is the Python process's (every thread), thread "
        "CPU the batch's own thread's; phases nest (`write` holds Spark's save, `commit` its steps). The runs are one query "
        "each, one after the other on a shared, loaded machine: the whole call's CPU moves by about 1.5 ms between runs of "
        "the same code, and wall time mostly with the load; a phase a change touched, and the counted calls, show it better.",
        "",
        "| run | code | batches | load average (before, after) |",
        "|---|---|---|---|",
    ]
    md += [f"| {r['label']} | {r.get('commit', '?')} | {r['batches']} | {r['load'][0][0]:.1f}, {r['load'][1][0]:.1f} |" for r in runs]
    md += ["", f"| phase | {head} |", "|---|" + "---|" * len(runs)]
    for phase in phases:
        cells = []
        for r in runs:
            p = r["phases"].get(phase)
            cells.append("-" if p is None else f"{p['cpu']:.2f} / {p['thread_cpu']:.2f} / {p['wall']:.2f}")
        md.append(f"| {phase} | " + " | ".join(cells) + " |")
    counts = [p for p in runs[-1]["phases"] if p.startswith("calls:")]
    for phase in counts:
        md.append(f"| {phase} (per batch) | " + " | ".join(f"{r['phases'].get(phase, {}).get('wall', 0):.1f}" for r in runs) + " |")
    return md + [""]


def _commit_of(code: str) -> str:
    """The measured checkout's commit, ``+`` if its library has changes not committed."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", code, *args], capture_output=True, text=True, check=False).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain", "streaming_exactly_once") else "")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("label")
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--code", help="the checkout whose library is measured (default: the installed one)")
    p.add_argument("--out", type=Path, default=RESULT)
    args = p.parse_args(argv)
    if args.code:
        sys.path.insert(0, args.code)
    work = Path(tempfile.mkdtemp(prefix="seo-tiny-cost-"))
    try:
        result = run(args.batches, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    import streaming_exactly_once

    code = str(Path(streaming_exactly_once.__file__).parent.parent)
    result = {"label": args.label, "code": code, "commit": _commit_of(code), "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), **result}
    runs = json.loads(args.out.read_text())["runs"] if args.out.exists() else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": [r for r in runs if r["label"] != args.label] + [result]}, indent=1))
    for phase, v in result["phases"].items():
        print(f"{phase:52s} cpu {v['cpu']:7.3f}  thread {v['thread_cpu']:7.3f}  wall {v['wall']:8.3f}")


if __name__ == "__main__":
    main()
