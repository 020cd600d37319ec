"""Throughput on the same input: plain foreachBatch append (1.00), Spark's file sink, this sink.

Every writer reads the same CSV files with the same file source (``maxFilesPerTrigger``) and
writes Parquet; writers run interleaved, round after round, in one SparkSession so that a noisy
machine affects them alike. Reported per writer: median wall time of a run, its ratio to plain
append in the same run, median ``addBatch`` time (from StreamingQueryProgress) and, for this sink,
the median and p99 of the commit overhead (everything but the Spark write).

A second series drives many *tiny* batches (one small file per trigger) to show cost versus
history: Spark's file sink lists ``_spark_metadata`` every batch and rewrites every entry each
10th batch; this sink keeps its state in memory.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .spark_env import spark_session, write_input
from .stats import summary

SCHEMA = "id LONG, p STRING, v DOUBLE"


class ProgressRecorder:
    """Collects ``addBatch`` durations of every progress event, per query id."""

    def __init__(self, spark) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        self.by_query: dict[str, list[float]] = {}
        recorder = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                progress = event.progress
                if progress.numInputRows:
                    add = progress.durationMs.get("addBatch")
                    if add is not None:
                        recorder.by_query.setdefault(str(progress.id), []).append(float(add))

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        self.listener = _Listener()
        spark.streams.addListener(self.listener)

    def take(self, query_id: str, expected: int, timeout: float = 30.0) -> list[float]:
        deadline = time.time() + timeout
        while len(self.by_query.get(query_id, [])) < expected and time.time() < deadline:
            time.sleep(0.05)  # listener events arrive asynchronously
        return self.by_query.pop(query_id, [])


def _timed_sink_class():
    """``ExactlyOnceSink`` whose ``foreachBatch`` call is timed, as plain append's function is."""
    from streaming_exactly_once import ExactlyOnceSink

    class TimedSink(ExactlyOnceSink):
        calls: list[float]

        def __call__(self, df, batch_id: int) -> None:
            t0 = time.perf_counter()
            try:
                super().__call__(df, batch_id)
            finally:
                self.calls.append((time.perf_counter() - t0) * 1000)

    return TimedSink


def _run_writer(
    spark, name: str, input_dir: Path, work: Path, files_per_trigger: int, recorder, events: list, calls: list | None = None
) -> dict[str, Any]:
    """One run of ``name``; ``calls`` gets the time of each ``foreachBatch`` call (ms), for the
    writers that have one."""
    from pyspark.sql import DataFrame

    calls = [] if calls is None else calls
    out, ckpt = work / f"{name}-out", work / f"{name}-ckpt"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ckpt, ignore_errors=True)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_trigger).csv(str(input_dir))
    sink = None
    # Every run starts with no dirty pages of an earlier run: Spark's writers do not sync, so
    # without this the kernel writes an earlier run's files back during whichever run comes
    # next, and that run pays for them (this sink syncs its own files within its run).
    os.sync()
    t0 = time.perf_counter()
    if name == "plain_foreachBatch":

        def append(df: DataFrame, batch_id: int) -> None:
            t_call = time.perf_counter()
            df.write.mode("append").parquet(str(out))
            calls.append((time.perf_counter() - t_call) * 1000)

        query = stream.writeStream.foreachBatch(append).option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    elif name == "spark_file_sink":
        query = stream.writeStream.format("parquet").option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start(str(out))
    else:
        mode = name.split("_")[-1]
        sink = _timed_sink_class()(str(out), staging_mode=mode, on_commit=events.append)
        sink.calls = calls
        query = sink.start(stream, checkpoint_location=str(ckpt), trigger={"availableNow": True})
    query.awaitTermination()
    wall = time.perf_counter() - t0
    if sink is not None:
        sink.close()
    return {"wall_s": wall, "query_id": str(query.id)}


def throughput(*, n_files: int, rows_per_file: int, files_per_trigger: int, rounds: int, work: Path) -> dict[str, Any]:
    spark = spark_session("seo-bench-throughput")
    input_dir = work / "input"
    rows = write_input(input_dir, n_files, rows_per_file)
    recorder = ProgressRecorder(spark)
    writers = ["plain_foreachBatch", "spark_file_sink", "exactly_once_rename", "exactly_once_direct"]
    walls: dict[str, list[float]] = {w: [] for w in writers}
    add_batch: dict[str, list[float]] = {w: [] for w in writers}
    call_ms: dict[str, list[float]] = {w: [] for w in writers}
    commit_ms: list[float] = []
    phases: dict[str, dict[str, list[float]]] = {w: {} for w in writers if w.startswith("exactly_once")}
    n_batches = -(-n_files // files_per_trigger)
    # warm-up run (JIT, class loading) not measured
    _run_writer(spark, "plain_foreachBatch", input_dir, work, files_per_trigger, recorder, [])
    recorder.by_query.clear()
    for r in range(rounds):
        order = writers[r % len(writers) :] + writers[: r % len(writers)]  # rotate who goes first
        for name in order:
            events: list = []
            result = _run_writer(spark, name, input_dir, work, files_per_trigger, recorder, events, call_ms[name])
            walls[name].append(result["wall_s"])
            add_batch[name] += recorder.take(result["query_id"], n_batches)
            commit_ms += [e["commitMs"] for e in events]
            for e in events:
                for phase, ms in (("prepare", e["stepMs"].get("prepare")), ("stage", e["stepMs"].get("stage")), ("commit", e["commitMs"])):
                    if ms is not None:
                        phases[name].setdefault(phase, []).append(ms)
            print(f"  round {r + 1} {name:22s} {result['wall_s']:7.2f} s", flush=True)
    base = statistics.median(walls["plain_foreachBatch"])
    table = {}
    for name in writers:
        med = statistics.median(walls[name])
        paired = [w / p for w, p in zip(walls[name], walls["plain_foreachBatch"], strict=True)]
        table[name] = {
            "wall_s": summary(walls[name]),
            "ratio_vs_plain": med / base,
            # each round's run against the plain run of the same round: the noise is visible
            "paired_ratios": [round(x, 3) for x in paired],
            "paired_ratio_median": statistics.median(paired),
            "addBatch_ms": summary(add_batch[name]),
            "addBatch_minus_plain_ms": statistics.median(add_batch[name]) - statistics.median(add_batch["plain_foreachBatch"])
            if add_batch[name] and add_batch["plain_foreachBatch"]
            else None,
        }
        if call_ms[name]:
            # the foreachBatch call alone, without Spark's planning and bookkeeping around it:
            # what a sink controls (Spark's own sink has no such call)
            table[name]["call_ms"] = summary(call_ms[name])
            table[name]["call_vs_plain"] = statistics.median(call_ms[name]) / statistics.median(call_ms["plain_foreachBatch"])
        if name in phases:
            # where a batch's time goes on the driver: before Spark's write, the write, the commit
            table[name]["phases_ms"] = {phase: summary(v) for phase, v in phases[name].items()}
    spark.stop()
    return {
        "input": {"files": n_files, "rows_per_file": rows_per_file, "rows": rows, "files_per_trigger": files_per_trigger, "batches": n_batches},
        "rounds": rounds,
        "writers": table,
        "commit_overhead_ms": summary(commit_ms),
    }


def tiny_batches(*, n_batches: int, work: Path, writers=("plain_foreachBatch", "spark_file_sink", "exactly_once_rename")) -> dict[str, Any]:
    """addBatch time vs batch id over many one-row batches (one tiny file per trigger). Plain
    ``foreachBatch`` append is the anchor: its growth is the engine's own (the file source's
    log, the checkpoint, the output directory), which every writer pays."""
    spark = spark_session("seo-bench-tiny")
    input_dir = work / "tiny-input"
    input_dir.mkdir(parents=True, exist_ok=True)
    for i in range(n_batches):
        (input_dir / f"t{i:06d}.csv").write_text(f"{i},a,0.5\n")
    recorder = ProgressRecorder(spark)
    series = {}
    for name in writers:
        events: list = []
        result = _run_writer(spark, name, input_dir, work, 1, recorder, events)
        durations = recorder.take(result["query_id"], n_batches, timeout=120)
        window = max(10, n_batches // 10)
        series[name] = {
            "addBatch_ms": durations,
            "first_window_median": statistics.median(durations[:window]) if durations else None,
            "last_window_median": statistics.median(durations[-window:]) if durations else None,
            "first_window_p99": summary(durations[:window])["p99"] if durations else None,
            "last_window_p99": summary(durations[-window:])["p99"] if durations else None,
            "wall_s": result["wall_s"],
            "commit_ms": [e["commitMs"] for e in events],
        }
        if events:  # our phases, first vs last window: which part of a batch grows
            series[name]["phases"] = {
                phase: {
                    "first_window_median": statistics.median(v[:window]),
                    "last_window_median": statistics.median(v[-window:]),
                }
                for phase, v in (
                    ("prepare", [e["stepMs"].get("prepare", 0.0) for e in events]),
                    ("stage", [e["stepMs"].get("stage", 0.0) for e in events]),
                    ("commit", [e["commitMs"] for e in events]),
                )
            }
        print(
            f"  tiny {name:22s} first {series[name]['first_window_median']:.1f} ms -> last {series[name]['last_window_median']:.1f} ms "
            f"(median addBatch over {window} batches)",
            flush=True,
        )
    spark.stop()
    return {"batches": n_batches, "series": series}


def main(size: str = "small", work: Path | None = None, only: Callable | None = None) -> dict[str, Any]:
    sizes = {
        "small": dict(n_files=40, rows_per_file=20_000, files_per_trigger=10, rounds=3, tiny=300),
        "full": dict(n_files=200, rows_per_file=20_000, files_per_trigger=10, rounds=8, tiny=2400),
    }[size]
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="seo-bench-")) if own else work
    try:
        out = {
            "throughput": throughput(
                n_files=sizes["n_files"],
                rows_per_file=sizes["rows_per_file"],
                files_per_trigger=sizes["files_per_trigger"],
                rounds=sizes["rounds"],
                work=work,
            ),
            "tiny_batches": tiny_batches(n_batches=sizes["tiny"], work=work),
        }
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    import json
    import sys

    result = main(sys.argv[1] if len(sys.argv) > 1 else "small")
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/throughput.json").write_text(json.dumps(result, indent=1))
