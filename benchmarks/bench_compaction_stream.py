"""Compaction at scale through real Spark streams: 10,000 tiny batches, in one run.

Three writers read the same input (one CSV file of 40 rows per trigger, spread over four
partitions, so four tiny Parquet files a batch): plain ``foreachBatch`` appending Parquet, this
sink without compaction, and this sink with it. Ten thousand Spark triggers take about 45
minutes a writer here, so the writers run interleaved ``CHUNK`` batches at a time: a round adds
``CHUNK`` input files, then each writer (in an order rotated every round) runs its query with
``availableNow`` over them and stops. Every round is one measurement of all three writers under
the same conditions; the ratios reported are medians of the rounds' ratios, beside the ratio of
the summed wall times.

The run is resumable: its state (tables, checkpoints, the rounds done) lives in ``WORK``, and a
second start goes on from the last finished round. A writer stopped inside a round finishes its
chunk when the run resumes, and that round is left out of the ratios.

Reported per writer: wall time per round and per batch, live data files after every round and
their size distribution at the end, commit latency (median, p99, max) for this sink, and the
readers at the end - Spark's planning (``inputFiles()``) and ``count()``, medians of three.
Every row is counted once in every table.

    python -m benchmarks.bench_compaction_stream WORK [--batches 10000] [--chunk 500] [--until T] [--out FILE]
    python -m benchmarks.bench_compaction_stream WORK --report

Whoever runs other work on the machine meanwhile notes it in ``WORK/busy.txt`` (``START END
note``, UTC); the report gives the ratios over every measured round and over the quiet ones.
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .bench_compaction import COMPACTION, SCHEMA, _live_files, run_writer
from .spark_env import spark_session
from .stats import percentile, summary

WRITERS = ("plain_foreachBatch", "exactly_once", "exactly_once_compacted")
ROWS = 40
#: Student's t at 95% (two-sided) for 1, 2, ... 30 degrees of freedom (more: the 30th)
# fmt: off
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# fmt: on


def _add_input(directory: Path, start: int, stop: int) -> None:
    """CSV files ``start``..``stop - 1``; the same rows as ``bench_compaction``'s input."""
    directory.mkdir(parents=True, exist_ok=True)
    for b in range(start, stop):
        lines = [f"{b * ROWS + r},{'abcd'[r % 4]},{r * 0.5}" for r in range(ROWS)]
        tmp = directory / f".t{b:06d}.csv.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(directory / f"t{b:06d}.csv")


def _chunk(spark: Any, name: str, work: Path) -> dict[str, Any]:
    """Run ``name``'s query over every input file it has not read; its wall time and commits."""
    wall, events = run_writer(spark, name, work / "input", work / f"{name}-out", work / f"{name}-ckpt")
    return {"wall_s": wall, "batches": len(events), "commit_ms": [e["commitMs"] for e in events if "commitMs" in e]}


def _readers(spark: Any, name: str, work: Path) -> dict[str, Any]:
    out = work / f"{name}-out"
    sizes = _live_files(spark, name, out)
    plan, scan = [], []
    rows = distinct = 0
    for _ in range(3):
        t = time.perf_counter()
        reader = spark.read.schema(SCHEMA).parquet(str(out))
        reader.inputFiles()
        plan.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        rows = reader.count()
        scan.append((time.perf_counter() - t) * 1000)
    distinct = spark.read.schema(SCHEMA).parquet(str(out)).select("id").distinct().count()
    return {
        "live_files": len(sizes),
        "file_bytes": {q: percentile([float(s) for s in sizes], q) for q in (0, 10, 50, 90, 100)},
        "plan_ms": statistics.median(plan),
        "count_ms": statistics.median(scan),
        "rows": rows,
        "distinct_ids": distinct,
    }


def _state(work: Path) -> dict[str, Any]:
    path = work / "state.json"
    if path.exists():
        state: dict[str, Any] = json.loads(path.read_text())
        return state
    return {"rounds": [], "partial": {}}


def _save(work: Path, state: dict[str, Any]) -> None:
    tmp = work / "state.json.tmp"
    tmp.write_text(json.dumps(state))
    tmp.replace(work / "state.json")


def run(work: Path, n_batches: int = 10_000, chunk: int = 500, deadline: float | None = None) -> dict[str, Any]:
    """Go on with the run in ``work`` until ``n_batches`` (or ``deadline``, a ``time.time()``)."""
    work.mkdir(parents=True, exist_ok=True)
    state = _state(work)
    spark = spark_session("seo-bench-compaction-stream")
    cold = True  # the first round of a process: the JVM warms up in its first writer's chunk
    try:
        while len(state["rounds"]) * chunk < n_batches:
            if deadline is not None and time.time() > deadline:
                break
            r = len(state["rounds"])
            _add_input(work / "input", r * chunk, (r + 1) * chunk)
            done = state["partial"].get(str(r), {})
            resumed = bool(done)
            started = time.time()
            order = WRITERS[r % len(WRITERS) :] + WRITERS[: r % len(WRITERS)]
            for name in order:
                if name in done:
                    continue
                result = _chunk(spark, name, work)
                result["live_files"] = len(_live_files(spark, name, work / f"{name}-out"))
                done[name] = result
                state["partial"][str(r)] = done
                _save(work, state)
                print(
                    f"  round {r + 1:3d} {name:24s} {result['wall_s']:7.2f} s {result['batches']:4d} batches {result['live_files']:6d} live files",
                    flush=True,
                )
            at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            state["rounds"].append({"writers": done, "resumed": resumed, "cold": cold, "start": started, "at": at})
            cold = False
            del state["partial"][str(r)]
            _save(work, state)
        batches = len(state["rounds"]) * chunk
        if batches >= n_batches and state.get("readers_at") != batches:
            state["readers"] = {name: _readers(spark, name, work) for name in WRITERS}
            state["readers_at"] = batches
            _save(work, state)
    finally:
        spark.stop()
    return report(state, chunk, _busy_windows(work))


def _busy_windows(work: Path) -> list[tuple[float, float]]:
    """``WORK/busy.txt``: windows in which other work ran on the machine (``START END note``,
    ISO times in UTC), written by whoever shares the machine with the run."""
    path = work / "busy.txt"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.startswith("#"):
            out.append((_epoch(parts[0]), _epoch(parts[1])))
    return out


def _epoch(iso: str) -> float:
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%S"))


def _span(r: dict[str, Any]) -> tuple[float, float]:
    """A round's time span (its end, less its writers' wall times and their live-file counts)."""
    end = _epoch(r["at"])
    return r.get("start", end - sum(w["wall_s"] for w in r["writers"].values()) - 10), end


def _ratios(rounds: list[dict[str, Any]], name: str, base: str) -> dict[str, Any]:
    ratios = [r["writers"][name]["wall_s"] / r["writers"][base]["wall_s"] for r in rounds]
    if not ratios:
        return {"rounds": 0}
    total = sum(r["writers"][name]["wall_s"] for r in rounds) / sum(r["writers"][base]["wall_s"] for r in rounds)
    out = {"rounds": len(ratios), "median_of_rounds": statistics.median(ratios), "of_summed_walls": total}
    if len(ratios) > 2:  # the rounds' ratios as a sample: their geometric mean and its 95% interval (Student's t)
        logs = [math.log(x) for x in ratios]
        mean, half = statistics.mean(logs), T95[min(len(logs) - 1, len(T95)) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
        out |= {"geomean_of_rounds": math.exp(mean), "geomean_95": [math.exp(mean - half), math.exp(mean + half)]}
    return out


def report(state: dict[str, Any], chunk: int, busy: Sequence[tuple[float, float]] = ()) -> dict[str, Any]:
    """Ratios over the measured rounds (every writer ran its whole chunk, none was resumed), and
    over the quiet ones among them (no busy window overlaps the round, and it is not the first
    round of a process, whose first writer pays for the JVM's warm-up)."""
    rounds = state["rounds"]
    measured = [r for r in rounds if not r["resumed"] and all(w["batches"] == chunk for w in r["writers"].values())]
    quiet = [r for r in measured if not r.get("cold") and not any(a < _span(r)[1] and _span(r)[0] < b for a, b in busy)]
    table: dict[str, Any] = {}
    for name in WRITERS:
        walls = [r["writers"][name]["wall_s"] for r in rounds]
        batches = sum(r["writers"][name]["batches"] for r in rounds)
        entry: dict[str, Any] = {
            "batches": batches,
            "wall_s_total": sum(walls),
            "ms_per_batch": 1000 * sum(walls) / max(1, batches),
            "ms_per_batch_quiet": 1000 * sum(r["writers"][name]["wall_s"] for r in quiet) / max(1, chunk * len(quiet)),
            "vs_plain": _ratios(measured, name, "plain_foreachBatch"),
            "vs_plain_quiet": _ratios(quiet, name, "plain_foreachBatch"),
            "vs_uncompacted": _ratios(measured, name, "exactly_once"),
            "vs_uncompacted_quiet": _ratios(quiet, name, "exactly_once"),
            "live_files_per_round": [r["writers"][name]["live_files"] for r in rounds],
        }
        commits = [ms for r in rounds for ms in r["writers"][name]["commit_ms"]]
        if commits:
            entry["commit_ms"] = summary(commits)
            entry["commit_ms_quiet"] = summary([ms for r in quiet for ms in r["writers"][name]["commit_ms"]])
        if "readers" in state:
            entry["readers"] = state["readers"][name]
        table[name] = entry
    return {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "input": {"batches": len(rounds) * chunk, "rows_per_batch": ROWS, "partitions": 4, "chunk": chunk},
        "rounds": len(rounds),
        "measured_rounds": len(measured),
        "quiet_rounds": [rounds.index(r) + 1 for r in quiet],
        "compaction": COMPACTION,
        "writers": table,
        **({"readers_at_batches": state["readers_at"]} if "readers_at" in state else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=500)
    parser.add_argument("--until", help="stop before a round that would start after this UTC time (ISO)")
    parser.add_argument("--report", action="store_true", help="only report the rounds done so far")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/compaction-stream-scale.json"), help="the results file")
    args = parser.parse_args()
    if args.report:
        result = report(_state(args.work), args.chunk, _busy_windows(args.work))
    else:
        run(args.work, args.batches, args.chunk, _epoch(args.until) if args.until else None)
        result = report(_state(args.work), args.chunk, _busy_windows(args.work))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "writers"}, indent=1))
    for name, entry in result["writers"].items():
        print(name, json.dumps({k: v for k, v in entry.items() if k != "live_files_per_round"}))


if __name__ == "__main__":
    main()
