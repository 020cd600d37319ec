"""``make bench [ARGS="full"]``: every benchmark in one process tree, then results and plots.

    python -m benchmarks [small|full] [--only throughput,readers,commit,log,datasets,delta,audit]

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


#: (name, label) in the order they run; ``--only`` picks names.
STEPS = (
    ("commit", "commit path (no Spark)"),
    ("log", "log layer"),
    ("readers", "readers"),
    ("datasets", "dataset groups (Spark)"),
    ("throughput", "throughput (Spark)"),
    ("delta", "Delta target (Spark; log growth without Spark)"),
    ("audit", "seo audit as the history grows (no Spark)"),
)


def _run(name: str, size: str):
    from importlib import import_module

    module = import_module(f"benchmarks.bench_{name}")
    if name == "audit":
        marks = "100,1000,10000" if size == "full" else "100,1000"
        return module.main(["--marks", marks, "--synthetic", "100000" if size == "full" else "0", "--out", str(RESULTS / "audit.json")])
    if name == "log":
        return module.main(["--entries", "1000000" if size == "full" else "100000", "--out", str(RESULTS / "log.json")])
    return module.main(size)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("size", nargs="?", default="small", choices=["small", "full"])
    p.add_argument("--only", default=",".join(name for name, _ in STEPS))
    args = p.parse_args(argv)
    wanted = set(args.only.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count(), "platform": platform.platform()}
    if wanted >= {name for name, _ in STEPS} or "date" not in results:  # a partial run keeps the others' date
        results["size"] = args.size
        results["date"] = time.strftime("%Y-%m-%d")
    for name, label in STEPS:
        if name not in wanted:
            continue
        print(f"{label}:", flush=True)
        results[name] = _run(name, args.size)
        path.write_text(json.dumps(results, indent=1))  # keep what is done if a later step fails
    from .report import write_report

    write_report(results)
    print(f"wrote {path}, docs/benchmarks.md and docs/img/*.png", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
