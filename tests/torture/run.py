"""``make torture ARGS="--kills 200"``: the long torture run, with a JSON summary at the end.

    python -m tests.torture.run [--kills 200] [--seed 7] [--work DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kills", type=int, default=200)
    p.add_argument("--seed", type=int, default=int(time.time()) % 10_000)
    p.add_argument("--rows-per-file", type=int, default=20)
    p.add_argument("--checkpoint-deletions", type=int, default=None)
    p.add_argument("--replays", type=int, default=None)
    p.add_argument("--work", default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--out", default="benchmarks/results/torture.json")
    args = p.parse_args(argv)

    from benchmarks.spark_env import spark_session
    from tests.torture.harness import TortureConfig, TortureRun
    from tests.torture.verify import verify_tortured_table

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="seo-torture-"))
    scale = max(1, args.kills // 30)
    config = TortureConfig(
        work=work,
        kills=args.kills,
        seed=args.seed,
        rows_per_file=args.rows_per_file,
        checkpoint_deletions=args.checkpoint_deletions if args.checkpoint_deletions is not None else 2 * scale,
        replays=args.replays if args.replays is not None else 2 * scale,
        concurrent_writers=scale,
    )
    stats = TortureRun(config).run()
    spark = spark_session("seo-torture-verify")
    try:
        result = verify_tortured_table(work / "table", work / "input", spark)
    finally:
        spark.stop()
    summary = {"seed": args.seed, "stats": asdict(stats), "verification": result}
    print(json.dumps(summary, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
