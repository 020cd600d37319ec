"""Compaction at scale: 10,000 tiny batches through the commit path, with and without compaction.

Spark's trigger costs about 0.25 s here, so 10,000 batches of a real stream take about 42
minutes per writer (``bench_compaction`` runs 200 of them, against plain ``foreachBatch`` and
Spark's file sink). This one replaces the Spark write with pre-made Parquet files, as
``bench_commit`` does, so that 10,000 batches take minutes and what grows with the table is
measured: every batch writes four tiny files (one per partition) and commits them in rename
mode; the two writers run interleaved, ``CHUNK`` batches at a time, on one machine.

Reported per writer: live data files every ``CHUNK`` batches and at the end, the end's file
size distribution, commit latency (median, p99, max; the compaction batches' apart), wall time
per batch, and the readers at the end - ``read.files`` (the manifest listing), a pyarrow count
of every row, and Spark's planning (``inputFiles()``) and ``count()``, medians of three. Every
row is counted once in each table.

    python -m benchmarks.bench_compaction_scale [BATCHES]
"""

from __future__ import annotations

import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .stats import summary

QUERY = "5ca1e5ca-1e00-0000-0000-000000000000"
CHUNK = 1000
ROWS = 8  # per file
PARTITIONS = ("a", "b", "c", "d")
COMPACTION = {"target_size": 8 << 20, "min_files": 8, "min_age_ms": 0, "max_bytes": 8 << 20}
WRITERS = ("exactly_once", "exactly_once_compacted")


def _parquet(ids: list[int]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([i * 0.5 for i in ids])}), buf)
    return buf.getvalue()


def _committer(root: Path, compacted: bool):
    from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
    from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
    from streaming_exactly_once.storage import open_storage

    policy = CompactionPolicy(**COMPACTION) if compacted else None
    return TableCommitter(open_storage(str(root)), CommitterOptions(partition_by=("p",), compaction=policy))


def _batch(committer: Any, b: int) -> float:
    """One batch of four files; its commit's milliseconds (``commitMs``)."""
    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import StagedFile
    from streaming_exactly_once.commit.protocol.sequence import commit_ms

    storage = committer.storage
    with committer.batch(QUERY, b, mode="rename") as attempt:
        files = []
        for n, p in enumerate(PARTITIONS):
            ids = list(range((b * len(PARTITIONS) + n) * ROWS, (b * len(PARTITIONS) + n + 1) * ROWS))
            final = f"p={p}/part-{n:05d}-{attempt.attempt}.c000.snappy.parquet"
            staged = f"{attempt.staging_dir}/data/{final}"
            storage.put_if_absent(staged, _parquet(ids))
            info = storage.info(staged)
            files.append(StagedFile(final=final, size=info.size, mtime_ms=info.mtime_ms, staged=staged))
        result = committer.commit(attempt, files, input_files=[InputFile(source=0, path=f"file:///in/{b}.csv", timestamp=1)], num_rows=ROWS * 4)
    return commit_ms(result.timings)


def _readers(root: Path, spark: Any) -> dict[str, Any]:
    from streaming_exactly_once import read

    out: dict[str, Any] = {}
    times: dict[str, list[float]] = {"listing_ms": [], "arrow_count_ms": [], "spark_plan_ms": [], "spark_count_ms": []}
    rows = None
    for _ in range(3):
        t0 = time.perf_counter()
        files = read.files(str(root))
        times["listing_ms"].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        table = read.arrow(str(root), columns=["id"])
        times["arrow_count_ms"].append((time.perf_counter() - t0) * 1000)
        ids = table.column("id").to_pylist()
        rows = (len(ids), len(set(ids)))
        if spark is not None:
            t0 = time.perf_counter()
            spark.read.parquet(str(root)).inputFiles()
            times["spark_plan_ms"].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            spark.read.parquet(str(root)).count()
            times["spark_count_ms"].append((time.perf_counter() - t0) * 1000)
    out.update({k: round(statistics.median(v), 1) for k, v in times.items() if v})
    out["live_files"] = len(files)
    out["rows"], out["distinct_rows"] = rows
    return out


def main(batches: int = 10_000, work: Path | None = None) -> dict[str, Any]:
    work = work or Path(tempfile.mkdtemp(prefix="seo-compaction-scale-"))
    roots = {name: work / name for name in WRITERS}
    for root in roots.values():
        shutil.rmtree(root, ignore_errors=True)
    committers = {name: _committer(roots[name], name.endswith("compacted")) for name in WRITERS}
    commit_ms: dict[str, list[float]] = {name: [] for name in WRITERS}
    wall_s: dict[str, float] = dict.fromkeys(WRITERS, 0.0)
    live: dict[str, list[tuple[int, int]]] = {name: [] for name in WRITERS}
    for start in range(0, batches, CHUNK):
        order = WRITERS if (start // CHUNK) % 2 == 0 else tuple(reversed(WRITERS))
        for name in order:
            c = committers[name]
            c.ensure_open()
            t0 = time.perf_counter()
            for b in range(start, min(start + CHUNK, batches)):
                commit_ms[name].append(_batch(c, b))
            wall_s[name] += time.perf_counter() - t0
            c.janitor.drain()
            live[name].append((min(start + CHUNK, batches), len(c.logs.require_manifest().files())))
        print(f"{min(start + CHUNK, batches)} batches: live files {[live[n][-1][1] for n in WRITERS]}", flush=True)
    for c in committers.values():
        c.close()
    spark = None
    try:
        from .spark_env import spark_session

        spark = spark_session()
    except Exception as exc:  # noqa: BLE001 - the Spark readers are reported as missing
        print(f"no Spark readers: {exc}")
    results: dict[str, Any] = {"batches": batches, "files_per_batch": len(PARTITIONS), "rows_per_file": ROWS, "compaction": COMPACTION}
    interval = 10
    for name in WRITERS:
        import os

        sizes = sorted(os.path.getsize(f.removeprefix("file://")) for f in _live_paths(roots[name]))
        compaction_ms = [ms for b, ms in enumerate(commit_ms[name]) if (b + 1) % interval == 0]
        other_ms = [ms for b, ms in enumerate(commit_ms[name]) if (b + 1) % interval != 0]
        results[name] = {
            "wall_s": round(wall_s[name], 1),
            "ms_per_batch": round(wall_s[name] * 1000 / batches, 2),
            "commit_ms": summary(commit_ms[name]),
            "commit_ms_compaction_batches": summary(compaction_ms),
            "commit_ms_other_batches": summary(other_ms),
            "live_files_every_chunk": live[name],
            "file_size_bytes": {
                "min": sizes[0],
                "median": int(statistics.median(sizes)),
                "p90": sizes[int(len(sizes) * 0.9)],
                "max": sizes[-1],
            },
            "readers": _readers(roots[name], spark),
        }
        assert results[name]["readers"]["rows"] == results[name]["readers"]["distinct_rows"] == batches * len(PARTITIONS) * ROWS, name
    base, comp = results["exactly_once"], results["exactly_once_compacted"]
    results["ratios"] = {
        "wall_compacted_vs_not": round(comp["wall_s"] / base["wall_s"], 3),
        "commit_p99_compacted_vs_not": round(comp["commit_ms"]["p99"] / base["commit_ms"]["p99"], 3),
        **{
            f"{k}_compacted_vs_not": round(comp["readers"][k] / base["readers"][k], 3)
            for k in ("listing_ms", "arrow_count_ms", "spark_plan_ms", "spark_count_ms")
            if k in comp["readers"] and base["readers"].get(k)
        },
    }
    if spark is not None:
        spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return results


def _live_paths(root: Path) -> list[str]:
    from streaming_exactly_once import read

    return list(read.files(str(root)))


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    out = main(n)
    text = json.dumps(out, indent=1)
    print(text)
    if n == 10_000:
        (Path(__file__).parent / "results" / "compaction-scale.json").write_text(text + "\n")
