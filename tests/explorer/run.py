"""``make explore ARGS=...``: the explorer's long run, one program at a time, and its tools.

    python -m tests.explorer.run --programs 200 --seed 1000 [--jobs 2] [--out NAME]
        programs seed .. seed+N-1; workers of 25 programs each (one SparkSession per worker
        process), --jobs at a time; resumable (seeds already in the results are skipped).
        Writes benchmarks/results/explore-NAME.jsonl (one line per program) and
        explore-NAME.json (programs, steps, kills, feature pairs covered, failures).
        --guided: seeds chosen (from --seed on) for the feature pairs their programs add.
    python -m tests.explorer.run --show SEED         the program of a seed, as a listing
    python -m tests.explorer.run --replay SEED|FILE  run one program (a seed, or a saved JSON
                                                     program) with its transcript; --shrink to
                                                     shrink it if it fails
A failure that is not a known open finding (``known.py``) is shrunk (``--no-shrink`` to skip)
and saved under the results' ``explore-NAME-regressions/`` as a program to add to
``tests/explorer/regressions``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.explorer.program import Program

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
CHUNK = 25
#: how many seeds a guided long run considers (generating 3,000 programs takes about half a second)
GUIDED_SPAN = 40_000


def program_of(ref: str, profile_name: str = "everything"):  # -> Program
    from tests.explorer.generate import EVERYTHING, SLICE, generate
    from tests.explorer.program import Program

    if ref.isdigit():
        return generate(int(ref), SLICE if profile_name == "slice" else EVERYTHING)
    data = json.loads(Path(ref).read_text())
    return Program.from_json(data.get("program", data))


def run_one(program, spark, *, log: bool = False, keep: bool = False):  # -> ProgramResult
    from tests.explorer.interpreter import Interpreter

    base = Path(os.environ.get("SEO_EXPLORE_WORK", tempfile.gettempdir()))
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"explore-{program.seed}-", dir=base))
    result = Interpreter(program, spark, work, log=log).execute()
    if result.ok and not keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        result.transcript.append(f"(work directory kept: {work})")
    return result


def record(program, result, known_id: str | None) -> dict:
    return {
        "seed": program.seed,
        "ok": result.ok,
        "signature": result.signature,
        "known": known_id,
        "inconclusive": result.inconclusive,
        "failures": [f.describe() for f in result.failures][:3],
        "features": sorted(result.features),
        "steps": result.steps,
        "kills": result.kills,
        "wall_s": round(result.wall_s, 1),
        "phases": {k: round(v, 1) for k, v in sorted(result.phases.items())},
        "setup": program.setup.describe(),
        **({} if result.ok else {"program": program.to_json(), "transcript": result.transcript[-60:]}),
    }


def shrink_and_save(program, result, spark, out_dir: Path) -> dict:
    from tests.explorer.shrink import shrink

    def signature_of(candidate):
        return run_one(candidate, spark).signature

    from tests.explorer.regressions import save

    small = shrink(program, result.signature, signature_of, log=lambda t: print(f"  {t}", flush=True))
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"{(result.signature or 'failure').replace(':', '-').replace(' ', '_')}-{program.seed}.json"
    save(out_dir / name, small, finding="?", title=result.failures[0].describe()[:200], failure=result.signature or "")
    return {"shrunk": small.listing(), "saved": str(out_dir / name)}


def worker(seeds: list[int], jsonl: Path, profile: str, shrink: bool, deadline: float = 0.0) -> int:
    """Run ``seeds`` in this process (one SparkSession), appending one line per program; no new
    program starts after ``deadline`` (epoch seconds, 0: none)."""
    from tests.explorer.known import known
    from tests.explorer.session import spark_session

    spark = spark_session()
    for seed in seeds:
        if deadline and time.time() > deadline:
            break
        program = program_of(str(seed), profile)
        result = run_one(program, spark)
        k = known(result.failures[0], program.setup) if result.failures else None
        line = record(program, result, k.id if k else None)
        status = "ok" if result.ok else f"FAILED {result.signature}" + (f" (known {k.id})" if k else "")
        print(f"[explore] seed {seed}: {status} steps {result.steps} kills {result.kills} {result.wall_s:.0f}s", flush=True)
        if not result.ok and k is None and shrink and not result.inconclusive:
            line.update(shrink_and_save(program, result, spark, jsonl.with_name(jsonl.stem + "-regressions")))
        with open(jsonl, "a") as fh:
            fh.write(json.dumps(line) + "\n")
    return 0


def done_seeds(jsonl: Path) -> set[int]:
    if not jsonl.exists():
        return set()
    return {json.loads(line)["seed"] for line in jsonl.read_text().splitlines() if line.strip()}


def guided_seeds(first: int, count: int, results: list[dict], profile: str, skip: tuple[str, ...] = (), span: int = 3000) -> list[int]:
    """``count`` seeds from ``first`` on, for the feature pairs no result so far covers (among
    ``first`` .. ``first + max(span, 2 * count)``; a long run looks at ``GUIDED_SPAN`` seeds, a
    few seconds, so that pairs only rare programs ask for are found). Greedily, the seed whose
    program asks for the most of those pairs that the seeds chosen before it do not, per action
    (a short program first; a Connect program's runs cost a server each). A program asks for
    more than it may do (a kill that finds nothing to commit), so once no seed adds a pair, a
    new round looks for each pair again with other seeds; once a round adds nothing, the next
    seeds in order. Every program is still its seed's."""
    from tests.explorer.coverage import all_pairs, pairs_of
    from tests.explorer.generate import program_features

    covered = set().union(*(pairs_of(r.get("features", [])) for r in results)) if results else set()
    target = all_pairs() - covered
    done = {r["seed"] for r in results}
    programs = {s: program_of(str(s), profile) for s in range(first, first + max(span, 2 * count)) if s not in done}
    pool = {s: (pairs_of(program_features(p)) & target, _cost(p)) for s, p in programs.items() if target and not _skipped(s, profile, skip)}
    chosen: list[int] = []
    wanted = set(target)
    while len(chosen) < count and pool:
        seed = max(pool, key=lambda s: (len(pool[s][0] & wanted) / pool[s][1], -s))
        if not pool[seed][0] & wanted:
            if wanted == target:
                break
            wanted = set(target)  # the next round
            continue
        chosen.append(seed)
        wanted -= pool.pop(seed)[0]
    rest = (s for s in range(first, first + 100 * count) if s not in done and s not in chosen and not _skipped(s, profile, skip))
    return chosen + [next(rest) for _ in range(count - len(chosen))]


def _cost(program: Program) -> float:
    """A program's rough cost in actions (a Connect program's runs each start a server)."""
    return (len(program.actions) + 4) * (3 if program.setup.connect else 1)


def earlier_results(jsonl: Path) -> list[dict]:
    """This run's results so far and those of the long runs on the coverage page
    (``coverage.PAGE_RESULTS``): a guided run looks for the pairs none of them covered, with
    seeds none of them ran."""
    from tests.explorer.coverage import PAGE_RESULTS, load

    paths = {jsonl.resolve()} | {(REPO / r).resolve() for r in PAGE_RESULTS}
    return load(sorted(p for p in paths if p.exists()))


def _skipped(seed: int, profile: str, skip: tuple[str, ...]) -> bool:
    return bool(skip) and any(source in skip for source in program_of(str(seed), profile).setup.sources)


def long_run(args: argparse.Namespace) -> int:
    jsonl = RESULTS / f"explore-{args.out}.jsonl"
    if args.guided:
        seeds = guided_seeds(args.seed, args.programs, earlier_results(jsonl), args.profile, tuple(args.skip_source), GUIDED_SPAN)
    else:
        seeds = [s for s in range(args.seed, args.seed + args.programs) if not _skipped(s, args.profile, tuple(args.skip_source))]
    todo = [s for s in seeds if s not in done_seeds(jsonl)]
    chunks = [todo[i : i + CHUNK] for i in range(0, len(todo), CHUNK)]
    running: list[subprocess.Popen] = []
    t0 = time.time()
    deadline = t0 + 60 * args.minutes if args.minutes else 0.0
    while chunks or running:
        if deadline and time.time() > deadline:
            chunks = []  # the running workers stop after their program
        while chunks and len(running) < args.jobs:
            seeds = chunks.pop(0)
            cmd = [
                sys.executable,
                "-m",
                "tests.explorer.run",
                "--worker",
                ",".join(map(str, seeds)),
                "--jsonl",
                str(jsonl),
                "--profile",
                args.profile,
            ]
            cmd += ["--no-shrink"] if args.no_shrink else []
            cmd += ["--deadline", str(deadline)] if deadline else []
            running.append(subprocess.Popen(cmd, cwd=REPO))
        time.sleep(2)
        running = [p for p in running if p.poll() is None]
    summary = summarize(jsonl, args, time.time() - t0)
    (RESULTS / f"explore-{args.out}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("features", "pairs", "failures")}, indent=1))
    return 0


def summarize(jsonl: Path, args: argparse.Namespace, wall_s: float) -> dict:
    from tests.explorer.coverage import load, summarize as cover

    results = load([jsonl])
    coverage = cover(results)
    keys = ("seed", "signature", "known", "inconclusive", "failures", "setup", "shrunk", "saved")
    failures = [{k: r.get(k) for k in keys} for r in results if not r["ok"]]
    return {
        "command": "make explore ARGS=" + repr(" ".join(sys.argv[1:])),
        "profile": args.profile,
        "seeds": sorted(r["seed"] for r in results),
        "programs": len(results),
        "passed": sum(r["ok"] for r in results),
        "failed": len(failures),
        "failed_unknown": sum(1 for f in failures if not f["known"] and not f["inconclusive"]),
        "inconclusive": sum(1 for f in failures if f["inconclusive"]),
        "steps": sum(r["steps"] for r in results),
        "kills": sum(r["kills"] for r in results),
        "program_s": round(sum(r["wall_s"] for r in results)),
        "wall_s_this_invocation": round(wall_s),
        "pairs_wanted": coverage["pairs_wanted"],
        "pairs_covered": coverage["pairs_covered"],
        "pairs_missing": coverage["pairs_missing"],
        "features": coverage["features"],
        "failures": failures,
        "pairs": coverage["pairs"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--programs", type=int, default=100)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default="long", help="results: benchmarks/results/explore-OUT.json[l]")
    p.add_argument("--profile", default="everything", choices=["everything", "slice"])
    p.add_argument("--guided", action="store_true", help="choose seeds whose programs cover feature pairs not covered yet")
    p.add_argument("--show", default=None, help="print the program of a seed (or a saved JSON program)")
    p.add_argument("--replay", default=None, help="run one program: a seed or a saved JSON program")
    p.add_argument("--keep", action="store_true", help="--replay: keep its work directory")
    p.add_argument("--shrink", action="store_true", help="--replay: shrink the program if it fails")
    p.add_argument("--no-shrink", action="store_true", help="long run: do not shrink new failures")
    p.add_argument(
        "--skip-source",
        action="append",
        default=[],
        help="long run: leave out programs reading this source (kafka: a machine too loaded to start its Python workers in 10 s)",
    )
    p.add_argument("--minutes", type=float, default=0, help="long run: start no program after this many minutes")
    p.add_argument("--summary", action="store_true", help="long run: only write the summary of its results so far")
    p.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--jsonl", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.show:
        print(program_of(args.show, args.profile).listing())
        return 0
    if args.worker:
        return worker([int(s) for s in args.worker.split(",")], Path(args.jsonl), args.profile, not args.no_shrink, args.deadline)
    if args.replay:
        from tests.explorer.session import spark_session

        spark = spark_session()
        program = program_of(args.replay, args.profile)
        print(program.listing(), flush=True)
        result = run_one(program, spark, log=True, keep=args.keep)
        print("\n".join(f.describe() for f in result.failures) or "passed", f"({result.steps} steps, {result.wall_s:.0f}s)")
        if result.failures and args.shrink:
            print(shrink_and_save(program, result, spark, RESULTS / "explore-replay-regressions")["shrunk"])
        return 1 if result.failures else 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.summary:
        summary = summarize(RESULTS / f"explore-{args.out}.jsonl", args, 0.0)
        (RESULTS / f"explore-{args.out}.json").write_text(json.dumps(summary, indent=1) + "\n")
        return 0
    return long_run(args)


if __name__ == "__main__":
    sys.exit(main())
