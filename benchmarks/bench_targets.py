"""The performance targets of this release, each beside the run that measured it.

    python -m benchmarks.bench_targets [--only spaced|recovery] [--live 1000000] [--spaced 60] [--tmpfs] [--out FILE]

measures what no other benchmark's results file holds on the current code - commit latency on a
table of ``--live`` files with batches 1 s apart (a real trigger's pace; the next compaction is
prepared in the background, as by default), and recovery after a crash with 100 / 1,000 / 10,000
batches of history - and writes ``benchmarks/results/targets.json``. The commit run keeps the
slowest batches' breakdown (``commit_anatomy``); ``--tmpfs`` runs it again in ``/dev/shm``, where an
fsync costs nothing, as ``spaced_tmpfs``: the same code without the disk's wait. ``section`` reads it with the
other benchmarks' results files and renders the targets table of ``docs/benchmarks.md``: a target,
its goal, what was measured, whether that meets it, and the file and date of the run. A target
missed says so; why is in the benchmark summary's notes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path("benchmarks/results")
RESULT = RESULTS / "targets.json"
#: the tiny-batch stream against plain ``foreachBatch``: the latest run of
#: ``bench_compaction_stream --out`` first, the 10,000-batch run of the release before after it
STREAM_RUNS = (RESULTS / "tiny-ratio.json", RESULTS / "compaction-stream-scale.json")


#: what ``targets.json`` keeps of ``bench_commit.history``'s result
KEPT = ("batches", "live_files", "all_ms", "other_batches_ms", "compaction_summary_ms", "compaction_ms", "peak_rss_mb", "largest_compact_bytes")


def _stamp() -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "load": [round(x, 1) for x in os.getloadavg()]}


def measure(what: str, *, live: int, spaced: int, histories: list[int], work: Path) -> dict[str, Any]:
    """One measurement (``spaced`` or ``recovery``) with its date and the machine's load averages."""
    from .bench_commit import history, recovery
    from .commit_anatomy import CommitAnatomy

    before = _stamp()
    if what == "spaced":
        with CommitAnatomy() as anatomy:
            run = history(
                batches=spaced, files_per_batch=10, work=work, time_box_s=900, interval_s=1.0, seed_live_files=live, prepare=True, anatomy=anatomy
            )
        out = {k: run[k] for k in KEPT} | {"anatomy": anatomy.summary()}
        print(f"  {live:,} live files, batches 1 s apart: {json.dumps(out['all_ms'])}", flush=True)
    else:
        out = {"histories": recovery(histories=histories, work=work)}
    return {**out, **before, "load_after": _stamp()["load"]}


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "**missed**")


def _memory(rows: list[tuple[str, ...]]) -> None:
    mem = _load(RESULTS / "memory.json")
    if not mem:
        return
    # the newest columns of each size (runs are added as columns, oldest first)
    at_1m = max(i for i, c in enumerate(mem["columns"]) if c.startswith("1M"))
    at_100k = max(i for i, c in enumerate(mem["columns"]) if c.startswith("100k"))
    peak = max(case[1 + at_1m] for case in mem["cases"])
    growth = ", ".join(f"{case[0]} {case[1 + at_100k]} -> {case[1 + at_1m]}" for case in mem["cases"])
    rows.append(
        (
            "peak memory at 1M live files, writer and readers",
            "<= 300 MB, flat from 100k",
            f"highest {peak} MB; 100k -> 1M: {growth}",
            _verdict(peak <= 300),
            f"memory.json ({mem['date']})",
        )
    )


def _stream_ratio(rows: list[tuple[str, ...]]) -> None:
    for path in STREAM_RUNS:
        run = _load(path)
        if not run:
            continue
        cells = []
        worst = 0.0
        for name, label in (("exactly_once", "compaction off"), ("exactly_once_compacted", "compaction on")):
            quiet, every = run["writers"][name]["vs_plain_quiet"], run["writers"][name]["vs_plain"]
            r, which = (quiet, "quiet rounds") if "geomean_of_rounds" in quiet else (every, "rounds, not all quiet")
            if "geomean_of_rounds" not in r:
                continue
            low, high = r["geomean_95"]
            worst = max(worst, r["geomean_of_rounds"])
            cell = f"{label} {r['geomean_of_rounds']:.3f}x (95%: {low:.2f}-{high:.2f}, {r['rounds']} {which})"
            if r is every and quiet.get("rounds"):
                cell += f", {quiet['median_of_rounds']:.2f}x in the {quiet['rounds']} quiet ones"
            cells.append(cell)
        what = f"tiny batches, {run['input']['batches']:,} batches of four tiny files vs plain `foreachBatch`"
        when = f"{path.name} ({run.get('date', '?')})"
        rows.append((what, "<= 1.02x", "; ".join(cells), _verdict(worst <= 1.02 if cells else None), when))


def _python_time(rows: list[tuple[str, ...]]) -> None:
    tiny = _load(RESULTS / "tiny_cost.json")
    if not tiny:
        return
    run = tiny["runs"][-1]
    own = run["phases"]["sink's own (call - spark save)"]
    load = run["load"][0][0]
    what = f"the sink's Python time per tiny batch (thread CPU; every thread {own['cpu']:.1f} ms; load {load:.1f})"
    rows.append(
        (what, "<= 6 ms", f"{own['thread_cpu']:.1f} ms", _verdict(own["thread_cpu"] <= 6), f"tiny_cost.json, run {run['label']} ({run['date']})")
    )


def _format_steps(rows: list[tuple[str, ...]]) -> None:
    delta = _load(RESULTS / "delta_growth.json")
    if delta:
        at = delta["at_versions"]
        first, last = at[min(at, key=int)]["delta_ms"]["median"], at[max(at, key=int)]["delta_ms"]["median"]
        span = f"{int(min(at, key=int)):,} -> {int(max(at, key=int)):,} versions"
        rows.append(
            (
                "Delta step as the log grows",
                "<= 2x",
                f"{first:.1f} -> {last:.1f} ms median, {last / first:.2f}x ({span})",
                _verdict(last / first <= 2),
                f"delta_growth.json ({delta['date']})",
            )
        )
    iceberg = _load(RESULTS / "iceberg_step.json")
    if iceberg:
        series = iceberg["expiry"]
        first, last = series[0], series[-1]
        ratio = last["step_median_ms"] / first["step_median_ms"]
        steps = " / ".join(f"{s['step_median_ms']:.1f}" for s in series)
        kept = " / ".join(str(s["snapshots"]) for s in series)
        marks = " / ".join(f"{s['batches']:,}" for s in series)
        measured = f"{steps} ms median at {marks} batches ({ratio:.2f}x), snapshots kept {kept}"
        rows.append(("Iceberg step as the table grows (snapshots expired)", "<= 2x", measured, _verdict(ratio <= 2), "iceberg_step.json"))


def _commit_and_recovery(rows: list[tuple[str, ...]]) -> None:
    run = _load(RESULT)
    if not run:
        return
    spaced = run.get("spaced")
    if spaced:
        p99 = spaced["all_ms"]["p99"]
        comp = spaced["compaction_summary_ms"]
        measured = f"p99 {p99:.1f} ms over {spaced['batches']} batches (median {spaced['all_ms']['median']:.1f})"
        measured += f"; compaction batches max {comp['max']:.1f} ms"
        anatomy = spaced.get("anatomy")
        if anatomy:
            slow = len(anatomy["slowest"])
            measured += (
                f"; of the slowest {slow}, {anatomy['slowest_with_fsyncs_over_twice_the_median']} waited on fsyncs over twice the"
                f" median ({anatomy['median']['fsyncs']:.0f} a batch, {anatomy['median']['fsync_ms']:.1f} ms summed),"
                f" {anatomy['slowest_compaction_batches']} were compaction batches"
            )
        tmpfs = run.get("spaced_tmpfs")
        if tmpfs:
            measured += f"; in memory (tmpfs, no fsync wait) p99 {tmpfs['all_ms']['p99']:.1f} ms (median {tmpfs['all_ms']['median']:.1f})"
        when = f"targets.json ({spaced['date']}, load {spaced['load'][0]})"
        rows.append((f"commit at {spaced['live_files']:,} live files, batches 1 s apart", "p99 <= 20 ms", measured, _verdict(p99 <= 20), when))
    rec = run.get("recovery")
    if rec:
        worst = max(r["process_start_to_first_commit_s"] for r in rec["histories"].values())
        cells = ", ".join(f"{int(h):,}: {r['process_start_to_first_commit_s']:.2f} s" for h, r in rec["histories"].items())
        what = "recovery: process start -> first new commit after a crash, by batches of history"
        rows.append((what, "<= 1 s", cells, _verdict(worst <= 1), f"targets.json ({rec['date']}, load {rec['load'][0]})"))


SOURCES: tuple[Callable[[list[tuple[str, ...]]], None], ...] = (_memory, _stream_ratio, _python_time, _format_steps, _commit_and_recovery)


def section() -> list[str]:
    """The targets table for ``docs/benchmarks.md`` (empty without any results file)."""
    rows: list[tuple[str, ...]] = []
    for source in SOURCES:
        source(rows)
    if not rows:
        return []
    md = [
        "## Targets of this release",
        "",
        "Each target beside the run that measured it (files under `benchmarks/results/`); `python -m "
        "benchmarks.bench_targets` measures the commit and recovery rows, the others come from their own benchmarks.",
        "",
        "| target | goal | measured | | run |",
        "|---|---|---|---|---|",
    ]
    md += ["| " + " | ".join(row) + " |" for row in rows]
    return md + [""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["spaced", "recovery"], help="one of the two (the other's result is kept)")
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--spaced", type=int, default=60, help="batches 1 s apart on the seeded table")
    parser.add_argument("--histories", default="100,1000,10000")
    parser.add_argument("--tmpfs", action="store_true", help="the commit run in /dev/shm (no fsync wait), kept as spaced_tmpfs")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    result = _load(args.out) or {}
    for what in [args.only] if args.only else ["spaced", "recovery"]:
        in_memory = args.tmpfs and what == "spaced"
        work = Path(tempfile.mkdtemp(prefix="seo-bench-targets-", dir="/dev/shm" if in_memory else None))
        try:
            histories = [int(h) for h in args.histories.split(",")]
            result[what + ("_tmpfs" if in_memory else "")] = measure(what, live=args.live, spaced=args.spaced, histories=histories, work=work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
