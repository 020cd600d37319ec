"""``make bench [ARGS="full"]``: every benchmark in one process tree, then results and plots.

    python -m benchmarks [small|full] [--only throughput,readers,commit,log,datasets]

Writes ``benchmarks/results/results.json``, ``docs/benchmarks.md`` and PNG plots under
``docs/img/``. ``small`` takes a few minutes; ``full`` is what the README reports.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

RESULTS = Path("benchmarks/results")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("size", nargs="?", default="small", choices=["small", "full"])
    p.add_argument("--only", default="throughput,readers,commit,log,datasets")
    args = p.parse_args(argv)
    wanted = set(args.only.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count(), "platform": platform.platform()}
    results["size"] = args.size
    results["date"] = time.strftime("%Y-%m-%d")
    if "commit" in wanted:
        from . import bench_commit

        print("commit path (no Spark):", flush=True)
        results["commit"] = bench_commit.main(args.size)
        path.write_text(json.dumps(results, indent=1))
    if "log" in wanted:
        from . import bench_log

        print("log layer:", flush=True)
        results["log"] = bench_log.main(["--entries", "1000000" if args.size == "full" else "100000", "--out", str(RESULTS / "log.json")])
        path.write_text(json.dumps(results, indent=1))
    if "readers" in wanted:
        from . import bench_readers

        print("readers:", flush=True)
        results["readers"] = bench_readers.main(args.size)
        path.write_text(json.dumps(results, indent=1))
    if "datasets" in wanted:
        from . import bench_datasets

        print("dataset groups (Spark):", flush=True)
        results["datasets"] = bench_datasets.main(args.size)
        path.write_text(json.dumps(results, indent=1))
    if "throughput" in wanted:
        from . import bench_throughput

        print("throughput (Spark):", flush=True)
        results["throughput"] = bench_throughput.main(args.size)
        path.write_text(json.dumps(results, indent=1))
    from .report import write_report

    write_report(results)
    print(f"wrote {path}, docs/benchmarks.md and docs/img/*.png", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
