"""A dataset group's commit as the number of tables per batch grows (1, 20, 200).

One ``DatasetSink`` batch splits ``rows`` rows by ``id % n`` into ``n`` tables (two Spark tasks,
so two files per table). Reported per ``n``: median and p95 of the whole batch, of the Spark
pass that stages it, and of the commit after it (WAL, the parallel moves, every table's manifest
and commit record, sources, group record), plus the per-step split. The same commit with one
thread (``move_threads=1``) shows what running steps in parallel buys. The batch is called
directly (``sink(df, batch_id)``), as ``foreachBatch`` would.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from .spark_env import spark_session
from .stats import summary


def one_series(spark, root: Path, *, n_tables: int, rows: int, batches: int, move_threads: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from streaming_exactly_once import DatasetSink

    sink = DatasetSink(str(root), dataset_column="ds", query_id="bench-datasets", move_threads=move_threads, watermark_columns=["id"])
    totals, stages, commits, steps = [], [], [], {}
    try:
        for b in range(batches):
            df = (
                spark.range(b * rows, (b + 1) * rows, numPartitions=2)
                .withColumn("ds", F.concat(F.lit("t"), (F.col("id") % n_tables).cast("string")))
                .withColumn("v", F.col("id") * 0.5)
            )
            t0 = time.perf_counter()
            sink(df, b)
            totals.append((time.perf_counter() - t0) * 1000)
            timings = sink.last_result.timings
            stages.append(timings.get("stage", 0.0))
            commits.append(sum(v for k, v in timings.items() if k not in ("stage", "intent")))
            for k, v in timings.items():
                steps.setdefault(k, []).append(v)
    finally:
        sink.close()
    # the first batch creates every table (identity files): report it apart
    return {
        "tables": n_tables,
        "move_threads": move_threads,
        "first_batch_ms": round(totals[0], 1),
        "batch_ms": summary(totals[1:]),
        "stage_ms": summary(stages[1:]),
        "commit_ms": summary(commits[1:]),
        "steps_ms": {k: summary(v[1:]) for k, v in steps.items()},
        "files_per_batch": sink.last_result.record.num_files if sink.last_result and sink.last_result.record else None,
    }


def main(size: str = "small") -> dict[str, Any]:
    cfg = {"small": dict(rows=20_000, batches=4), "full": dict(rows=200_000, batches=8)}[size]
    work = Path(tempfile.mkdtemp(prefix="seo-bench-datasets-"))
    spark = spark_session("seo-bench-datasets")
    out: dict[str, Any] = {"rows_per_batch": cfg["rows"], "series": []}
    try:
        for n in (1, 20, 200):
            for threads in (8, 1) if n == 200 else (8,):
                r = one_series(spark, work / f"g{n}-{threads}", n_tables=n, rows=cfg["rows"], batches=cfg["batches"], move_threads=threads)
                out["series"].append(r)
                print(
                    f"  {n:3d} tables, {threads} thread(s): batch median {r['batch_ms']['median']:.0f} ms "
                    f"(stage {r['stage_ms']['median']:.0f} ms, commit {r['commit_ms']['median']:.1f} ms, p95 {r['commit_ms']['p95']:.1f} ms)",
                    flush=True,
                )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    import json
    import sys

    result = main(sys.argv[1] if len(sys.argv) > 1 else "small")
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/datasets.json").write_text(json.dumps(result, indent=1))
