"""Compaction in the stream: many tiny batches, with and without it, against plain ``foreachBatch``
and Spark's file sink in the same run.

Every writer reads the same input (one small CSV file per trigger, rows spread over four
partitions, so four tiny Parquet files per batch) and the writers run interleaved, round after
round, in one SparkSession. Reported per writer: median wall time of a run and its ratio to
plain append; live data files at the end and their median size; reader planning time
(``spark.read.parquet(table).inputFiles()``) and a full read (``count()``), medians of three;
for this sink the median and p99 of the commit (``commitMs``) and, with compaction, of the
rewrite (``stepMs.rewrite``, in the background) and of the compaction batch's check of it on its
path (``stepMs.compaction``).

    python -m benchmarks.bench_compaction [small|full|scale] [ROUNDS]

``scale`` is 10,000 batches in one go: some 3 hours here (Spark's trigger costs ~0.3 s). The
run at that size is ``bench_compaction_stream``: interleaved in chunks, and resumable.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .spark_env import spark_session
from .stats import summary

SCHEMA = "id LONG, p STRING, v DOUBLE"
WRITERS = ("plain_foreachBatch", "spark_file_sink", "exactly_once", "exactly_once_compacted")
COMPACTION = {"target_size": "8MB", "min_files": 8, "min_age": 0}


def _input(directory: Path, n_batches: int, rows: int) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    for b in range(n_batches):
        lines = [f"{b * rows + r},{'abcd'[r % 4]},{r * 0.5}" for r in range(rows)]
        (directory / f"t{b:06d}.csv").write_text("\n".join(lines) + "\n")
    return n_batches * rows


def _live_files(spark, name: str, out: Path) -> list[int]:
    """Sizes of the files a reader of ``out`` reads."""
    if name == "plain_foreachBatch":
        return [p.stat().st_size for p in out.rglob("*.parquet")]
    files = spark.read.schema(SCHEMA).parquet(str(out)).inputFiles()
    return [Path(f.removeprefix("file://")).stat().st_size for f in files]


def run_writer(spark, name: str, input_dir: Path, out: Path, ckpt: Path) -> tuple[float, list[dict[str, Any]]]:
    """One writer's ``availableNow`` query over the input files it has not read: its wall time,
    and one event a batch (this sink's ``on_commit`` events; ``{"batchId"}`` for plain
    ``foreachBatch``; none for Spark's file sink)."""
    from streaming_exactly_once import ExactlyOnceSink

    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).csv(str(input_dir))
    events: list[dict[str, Any]] = []
    sink = None
    t0 = time.perf_counter()
    if name == "plain_foreachBatch":

        def append(df: Any, batch_id: int) -> None:
            df.write.mode("append").partitionBy("p").parquet(str(out))
            events.append({"batchId": batch_id})

        query = stream.writeStream.foreachBatch(append).option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    elif name == "spark_file_sink":
        query = (
            stream.writeStream.format("parquet").partitionBy("p").option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start(str(out))
        )
    else:
        compaction = COMPACTION if name.endswith("compacted") else None
        sink = ExactlyOnceSink(str(out), partition_by=["p"], on_commit=events.append, compaction=compaction)
        query = sink.start(stream, checkpoint_location=str(ckpt), trigger={"availableNow": True})
    query.awaitTermination()
    wall = time.perf_counter() - t0
    if sink is not None:
        sink.close()
    return wall, events


def _run(spark, name: str, input_dir: Path, work: Path) -> dict[str, Any]:
    out, ckpt = work / f"{name}-out", work / f"{name}-ckpt"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ckpt, ignore_errors=True)
    wall, events = run_writer(spark, name, input_dir, out, ckpt)
    events = [e for e in events if "commitMs" in e]  # this sink's
    sizes = _live_files(spark, name, out)
    plan, scan = [], []
    for _ in range(3):
        t = time.perf_counter()
        reader = spark.read.schema(SCHEMA).parquet(str(out))
        reader.inputFiles()
        plan.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        reader.count()
        scan.append((time.perf_counter() - t) * 1000)
    result: dict[str, Any] = {
        "wall_s": wall,
        "live_files": len(sizes),
        "median_file_bytes": statistics.median(sizes) if sizes else 0,
        "plan_ms": statistics.median(plan),
        "count_ms": statistics.median(scan),
    }
    if events:
        result["commit_ms"] = [e["commitMs"] for e in events]
        # the rewrite runs in the background; the compaction batch checks it on its path
        result["rewrite_ms"] = [e["stepMs"]["rewrite"] for e in events if "rewrite" in e.get("stepMs", {})]
        result["check_ms"] = [e["stepMs"]["compaction"] for e in events if "compaction" in e.get("stepMs", {})]
    return result


def main(size: str = "small", work: Path | None = None, rounds: int | None = None) -> dict[str, Any]:
    n_batches, rows, default_rounds = {"small": (200, 40, 2), "full": (1000, 40, 3), "scale": (10_000, 40, 1)}[size]
    rounds = rounds or default_rounds
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="seo-bench-compaction-")) if own else work
    spark = spark_session("seo-bench-compaction")
    try:
        total = _input(work / "input", n_batches, rows)
        _run(spark, "plain_foreachBatch", work / "input", work)  # warm-up, not measured
        runs: dict[str, list[dict[str, Any]]] = {w: [] for w in WRITERS}
        for r in range(rounds):
            for name in WRITERS[r % len(WRITERS) :] + WRITERS[: r % len(WRITERS)]:
                result = _run(spark, name, work / "input", work)
                runs[name].append(result)
                print(f"  round {r + 1} {name:24s} {result['wall_s']:7.2f} s, {result['live_files']:5d} live files", flush=True)
        base = statistics.median(x["wall_s"] for x in runs["plain_foreachBatch"])
        table: dict[str, Any] = {}
        for name in WRITERS:
            walls = [x["wall_s"] for x in runs[name]]
            last = runs[name][-1]
            table[name] = {
                "wall_s": summary(walls),
                "ratio_vs_plain": statistics.median(walls) / base,
                "live_files": last["live_files"],
                "median_file_bytes": last["median_file_bytes"],
                "plan_ms": statistics.median(x["plan_ms"] for x in runs[name]),
                "count_ms": statistics.median(x["count_ms"] for x in runs[name]),
            }
            commits = [ms for x in runs[name] for ms in x.get("commit_ms", [])]
            if commits:
                table[name]["commit_ms"] = summary(commits)
            for key in ("rewrite_ms", "check_ms"):
                values = [ms for x in runs[name] for ms in x.get(key, [])]
                if values:
                    table[name][key] = summary(values)
        return {"input": {"batches": n_batches, "rows": total, "partitions": 4}, "rounds": rounds, "compaction": COMPACTION, "writers": table}
    finally:
        spark.stop()
        if own:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    result = main(sys.argv[1] if len(sys.argv) > 1 else "small", rounds=int(sys.argv[2]) if len(sys.argv) > 2 else None)
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/compaction.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["writers"], indent=1))
