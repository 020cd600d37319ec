"""``make torture ARGS="--kills 200"``: the long torture run, with a JSON summary at the end.

    python -m tests.torture.run [--kills 200] [--seed 7] [--work DIR] [--keep] [--forks]
        [--zombies N] [--compact-interval K] [--delta [--private-manifest]] [--evolve] [--kafka]

``--forks`` tortures dataset groups (two outputs, one of them split by dataset) instead of single
tables: every group commit boundary, random kills, checkpoint deletions, replays, a second writer.

``--delta`` tortures ``format="delta"`` tables (``_spark_metadata`` kept too): the Delta step's
boundaries join the cycle, and every table is also checked as Delta readers see it
(``verify.verify_tortured_delta``: delta-rs and polars, one Delta version per batch with our
transaction, the same files as the manifest). ``make torture ARGS="--delta --kills 200"``.
``--delta --private-manifest`` writes them with ``spark_manifest=False`` (the manifest only in
``_seo/manifest``; vanilla Spark is not asked, the independent parse reads that manifest).

``--evolve`` makes every driver add a column (``schema_evolution="add_columns"``): each run's first
batch changes the table's schema, so ``after-schema`` (its schema record written, its manifest
entry not yet) joins the boundaries killed at.

``--kafka`` reads a Kafka-like source (``streaming_exactly_once.testing.fake_kafka``) instead of CSV files:
records with unique ids produced to two topics (a partition added halfway), every checkpoint
deletion restarting the query from ``startingOffsets=earliest`` and from ``sink.starting_offsets()``
in turn; every produced record must be in the table once and the table's offsets must be the
partitions' ends (``verify.verify_tortured_kafka``). ``make torture ARGS="--kafka --kills 60"``.

``--zombies N`` mixes N zombie takeovers into the runs (``TortureRun.zombie_takeover``): a driver
frozen with SIGSTOP at a commit boundary (cycling through the boundaries of each table's mode),
a successor driver that commits through a compaction meanwhile and is still running when the
zombie is resumed; the zombie must stop without publishing, the successor must carry on. Each
costs two driver start-ups; ``--compact-interval 3`` keeps the successor's part short.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
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
    p.add_argument("--out", default=None, help="summary JSON (default benchmarks/results/torture[-forks].json)")
    p.add_argument("--forks", action="store_true", help="torture dataset groups (DatasetSink with forks)")
    p.add_argument("--zombies", type=int, default=0, help="zombie takeovers mixed into the runs (split over the two tables)")
    p.add_argument("--compact-interval", type=int, default=10, help="compact interval of the tortured tables")
    p.add_argument("--connect", action="store_true", help="drivers are Spark Connect clients (the sink runs in the server's foreachBatch worker)")
    p.add_argument("--delta", action="store_true", help="torture format='delta' tables (checked through delta-rs and polars too)")
    p.add_argument("--evolve", action="store_true", help="every run adds a column: schema-changing commits are killed too")
    p.add_argument("--private-manifest", action="store_true", help="with --delta: spark_manifest=False")
    p.add_argument("--kafka", action="store_true", help="read a Kafka-like source; checkpoint deletions restart from earliest / starting_offsets()")
    args = p.parse_args(argv)
    if args.delta and args.forks:
        p.error("--delta tortures single tables; --forks dataset groups")
    if args.private_manifest and not args.delta:
        p.error("--private-manifest is a --delta option (spark_manifest=False needs format='delta')")
    if args.kafka and (args.forks or args.delta or args.connect or args.evolve or args.zombies):
        p.error("--kafka tortures single parquet tables with classic drivers (no --forks, --delta, --connect, --evolve, --zombies)")
    manifest = "_seo/manifest" if args.private_manifest else "_spark_metadata"

    from benchmarks.spark_env import spark_session
    from tests.torture.harness import TortureConfig, TortureRun
    from tests.torture.verify import verify_tortured_delta, verify_tortured_group, verify_tortured_kafka, verify_tortured_table

    suffix = (
        ("-forks" if args.forks else "")
        + ("-delta" if args.delta else "")
        + ("-private" if args.private_manifest else "")
        + ("-connect" if args.connect else "")
        + ("-evolve" if args.evolve else "")
        + ("-kafka" if args.kafka else "")
    )
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="seo-torture-"))
    half = max(15, args.kills // 2)
    scale = max(1, half // 15)
    configs = [
        TortureConfig(
            work=work / name,
            kills=half,
            seed=args.seed + i,
            rows_per_file=args.rows_per_file,
            checkpoint_deletions=args.checkpoint_deletions if args.checkpoint_deletions is not None else (max(2, scale) if args.kafka else scale),
            replays=args.replays if args.replays is not None else scale,
            concurrent_writers=max(1, scale // 2),
            boundary_modes=(mode,),
            name=name + suffix,
            forks=args.forks,
            delta=args.delta,
            compact_interval=args.compact_interval,
            connect=args.connect,
            evolve=args.evolve,
            private_manifest=args.private_manifest,
            kafka=args.kafka,
            run_timeout_s=120.0 if args.connect else TortureConfig.run_timeout_s,
            zombies=args.zombies // 2 + (args.zombies % 2 if i == 0 else 0),
            lease_timeout="10s" if args.zombies else "20s",
        )
        for i, (name, mode) in enumerate((("torture-rename", "rename"), ("torture-direct", "direct")))
    ]
    runs = [TortureRun(c) for c in configs]
    threads = [threading.Thread(target=r.run) for r in runs]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    spark = spark_session("seo-torture-verify")
    try:
        if args.forks:
            results = {r.c.name: verify_tortured_group(r.table, r.input, spark) for r in runs}
        elif args.kafka:
            results = {r.c.name: verify_tortured_kafka(r.table, r.kafka, spark) for r in runs}
        else:
            results = {r.c.name: verify_tortured_table(r.table, r.input, spark, manifest=manifest) for r in runs}
    finally:
        spark.stop()
    delta = {r.c.name: verify_tortured_delta(r.table, r.input, manifest=manifest) for r in runs} if args.delta else {}
    summary = {
        "seed": args.seed,
        "kills": sum(r.stats.kills for r in runs),
        "zombies": {r.c.name: r.stats.zombies for r in runs},
        "rows": sum(v["expected_rows"] for v in results.values()),
        "duplicates": sum(v.get("vanilla_spark", v["library_arrow"])["duplicates"] + v["independent_pyarrow"]["duplicates"] for v in results.values())
        + sum(v[k]["duplicates"] for v in delta.values() for k in ("delta_rs", "polars_delta")),
        "losses": sum(v.get("vanilla_spark", v["library_arrow"])["losses"] + v["independent_pyarrow"]["losses"] for v in results.values())
        + sum(v[k]["losses"] for v in delta.values() for k in ("delta_rs", "polars_delta")),
        "wall_s": round(wall, 1),
        "stats": {r.c.name: asdict(r.stats) for r in runs},
        "verification": results,
        "delta_verification": delta,
    }
    print(json.dumps(summary, indent=1))
    out = Path(args.out or f"benchmarks/results/torture{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
