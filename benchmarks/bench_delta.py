"""The Delta target: throughput next to plain append and the Spark-manifest mode, and the cost
of the Delta commit as the table's log grows.

* **throughput** (Spark) - the same CSV input written by plain ``foreachBatch`` append (1.00),
  by this sink publishing ``_spark_metadata`` only (``format="parquet"``) and by this sink with
  ``format="delta"`` (``_spark_metadata`` *and* one Delta commit per batch). The three run
  interleaved, round after round, in one SparkSession; medians of the run's wall time, ratios to
  plain append, and the medians of the sink's commit overhead and of its ``delta`` step.
* **growth** (no Spark) - ``TableCommitter`` with a Delta step commits one tiny batch (one real
  Parquet file) after another until the Delta log holds N versions; the ``delta`` step's time
  (read the log's new tail, commit ``N.json`` put-if-absent, a checkpoint every
  ``checkpoint_interval`` versions) is reported per window of versions. With checkpoints, log
  replay reads at most ``checkpoint_interval`` JSON files, so the cost must stay flat.
"""

from __future__ import annotations

import io
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from .spark_env import spark_session, write_input
from .stats import summary

SCHEMA = "id LONG, p STRING, v DOUBLE"
QUERY = "dddddddd-dddd-dddd-dddd-dddddddddddd"
WRITERS = ("plain_foreachBatch", "exactly_once_manifest", "exactly_once_delta")


def _run_writer(spark, name: str, input_dir: Path, work: Path, files_per_trigger: int, events: list) -> float:
    from streaming_exactly_once import ExactlyOnceSink

    out, ckpt = work / f"{name}-out", work / f"{name}-ckpt"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ckpt, ignore_errors=True)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_trigger).csv(str(input_dir))
    sink = None
    t0 = time.perf_counter()
    if name == "plain_foreachBatch":

        def append(df, batch_id: int) -> None:
            df.write.mode("append").partitionBy("p").parquet(str(out))  # partitioned like the sinks

        query = stream.writeStream.foreachBatch(append).option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    else:
        fmt = "delta" if name.endswith("delta") else "parquet"
        sink = ExactlyOnceSink(str(out), format=fmt, partition_by=["p"], staging_mode="rename", on_commit=events.append)
        query = sink.start(stream, checkpoint_location=str(ckpt), trigger={"availableNow": True})
    query.awaitTermination()
    wall = time.perf_counter() - t0
    if sink is not None:
        sink.close()
    return wall


def throughput(*, n_files: int, rows_per_file: int, files_per_trigger: int, rounds: int, work: Path) -> dict[str, Any]:
    spark = spark_session("seo-bench-delta")
    input_dir = work / "input"
    rows = write_input(input_dir, n_files, rows_per_file)
    walls: dict[str, list[float]] = {w: [] for w in WRITERS}
    commit_ms: dict[str, list[float]] = {w: [] for w in WRITERS[1:]}
    delta_ms: list[float] = []
    _run_writer(spark, "plain_foreachBatch", input_dir, work, files_per_trigger, [])  # warm-up, not measured
    try:
        for r in range(rounds):
            order = WRITERS[r % len(WRITERS) :] + WRITERS[: r % len(WRITERS)]  # rotate who goes first
            for name in order:
                events: list = []
                walls[name].append(_run_writer(spark, name, input_dir, work, files_per_trigger, events))
                if name in commit_ms:
                    commit_ms[name] += [e["commitMs"] for e in events]
                    delta_ms += [e["stepMs"]["delta"] for e in events if "delta" in e.get("stepMs", {})]
                print(f"  round {r + 1} {name:22s} {walls[name][-1]:7.2f} s", flush=True)
    finally:
        spark.stop()
    base = statistics.median(walls["plain_foreachBatch"])
    manifest = statistics.median(walls["exactly_once_manifest"])
    return {
        "input": {
            "files": n_files,
            "rows_per_file": rows_per_file,
            "rows": rows,
            "files_per_trigger": files_per_trigger,
            "batches": -(-n_files // files_per_trigger),
        },
        "rounds": rounds,
        "writers": {
            name: {
                "wall_s": summary(walls[name]),
                "ratio_vs_plain": statistics.median(walls[name]) / base,
                "ratio_vs_manifest": statistics.median(walls[name]) / manifest,
                **({"commit_ms": summary(commit_ms[name])} if name in commit_ms else {}),
            }
            for name in WRITERS
        },
        "delta_step_ms": summary(delta_ms),
    }


def _parquet(ids: list[int]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
    return buf.getvalue()


def growth(
    *,
    versions: int,
    checkpoint_interval: int,
    work: Path,
    windows=(100, 1_000, 10_000),
    window: int = 100,
    log_retention_ms: int | None = None,
    s3: dict[str, Any] | None = None,
    label: str = "local",
) -> dict[str, Any]:
    """Commit ``versions`` one-file batches through ``TableCommitter`` (Delta step).

    ``log_retention_ms`` sets ``delta.logRetentionDuration`` (None: Delta's 30 days), so
    delta-rs's expired-log cleanup at each checkpoint keeps ``_delta_log`` to the versions of
    that window; ``s3`` (endpoint options of a moto server) runs the same series on S3, whose
    listing starts after a key, in direct mode (the sink's default there)."""
    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile, TableCommitter
    from streaming_exactly_once.delta.target import DeltaSettings
    from streaming_exactly_once.storage import open_storage

    root = work / f"growth-{label}-{checkpoint_interval}"
    shutil.rmtree(root, ignore_errors=True)
    storage = open_storage(f"s3://{s3['bucket']}/{label}" if s3 else str(root), s3["options"] if s3 else None)
    mode = "direct" if s3 else "rename"
    settings = DeltaSettings(checkpoint_interval=checkpoint_interval, log_retention_ms=log_retention_ms)
    options = CommitterOptions(heartbeat=False, partition_by=("p",), delta=settings)
    committer = TableCommitter(storage, options)
    committer.open()
    schema = json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                {"name": "p", "type": "string", "nullable": True, "metadata": {}},
            ],
        }
    )
    delta_ms: list[float] = []
    total_ms: list[float] = []
    t_start = time.perf_counter()
    try:
        for b in range(versions):
            attempt = committer.begin(QUERY, b, mode=mode)
            rel = f"p=a/part-00000-{attempt.attempt}-{b}.c000.snappy.parquet"
            staged = f"{attempt.staging_dir}/data/{rel}" if mode == "rename" else rel
            if mode == "direct":  # the intent a direct-mode writer records before its file
                storage.put_if_absent(f"{attempt.staging_dir}/intents/{rel.rsplit('/', 1)[1]}", rel.encode())
            storage.put_if_absent(staged, _parquet([b]))
            info = storage.info(staged)
            files = [StagedFile(final=rel, size=info.size, mtime_ms=info.mtime_ms, staged=staged if mode == "rename" else None)]
            inputs = [InputFile(source=0, path=f"file:///in/{b}.csv", timestamp=1)]
            result = committer.commit(attempt, files, input_files=inputs, num_rows=1, schema=schema)
            delta_ms.append(result.timings["delta"])
            total_ms.append(sum(v for k, v in result.timings.items() if k != "stage"))
            if (b + 1) % 1000 == 0:
                print(
                    f"  growth {label} (checkpoint every {checkpoint_interval}): {b + 1} versions, delta step median of the last "
                    f"1000 {statistics.median(delta_ms[-1000:]):.1f} ms",
                    flush=True,
                )
    finally:
        committer.close()
    at = {}
    for n in windows:
        if n <= versions:
            lo = max(0, n - window)
            chunk = delta_ms[lo:n]
            # versions k * interval - 1 also write a checkpoint and run the log cleanup (one delta-rs load each)
            due = [v for v in range(lo, n) if (v + 1) % checkpoint_interval == 0]
            at[str(n)] = {
                "delta_ms": summary(chunk),
                "commit_ms": summary(total_ms[lo:n]),
                "delta_ms_checkpoint_versions": summary([delta_ms[v] for v in due]) if due else None,
                "delta_ms_other_versions": summary([delta_ms[v] for v in range(lo, n) if v not in set(due)]),
            }
    log_files = len(storage.list_dir("_delta_log")) if s3 else len(list((root / "_delta_log").iterdir()))
    return {
        "label": label,
        "storage": "s3 (moto server)" if s3 else "local disk",
        "log_retention_ms": log_retention_ms,
        "versions": versions,
        "checkpoint_interval": checkpoint_interval,
        "window": window,
        "at_versions": at,
        "wall_s": time.perf_counter() - t_start,
        "delta_log_files": log_files,
    }


class _MotoS3:
    """moto's S3 server on 127.0.0.1 (port 0) with one bucket, as the S3 tests start it."""

    def __enter__(self) -> dict[str, Any]:
        import logging

        import boto3
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        ).create_bucket(Bucket="bench")
        return {
            "bucket": "bench",
            "options": {"endpoint_url": endpoint, "key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}},
        }

    def __exit__(self, *exc: Any) -> None:
        self.server.stop()


def growth_series(*, versions: int, s3_versions: int, work: Path) -> list[dict[str, Any]]:
    """What bounds the step's growth: the same series with a 30-second log retention (delta-rs's
    expired-log cleanup keeps ``_delta_log`` to that window), and on S3 with Delta's default."""
    marks = (100, 1_000, 2_000, 5_000, 10_000)
    out = [
        growth(
            versions=versions,
            checkpoint_interval=10,
            work=work,
            log_retention_ms=30_000,
            label="local-retention-30s",
            windows=tuple(m for m in marks if m <= versions),
        )
    ]
    with _MotoS3() as s3:
        out.append(
            growth(versions=s3_versions, checkpoint_interval=10, work=work, s3=s3, label="s3", windows=tuple(m for m in marks if m <= s3_versions))
        )
    return out


def main(size: str = "small", work: Path | None = None, versions: int | None = None) -> dict[str, Any]:
    sizes = {
        "small": dict(n_files=20, rows_per_file=20_000, files_per_trigger=5, rounds=3, versions=1_000),
        "full": dict(n_files=60, rows_per_file=20_000, files_per_trigger=5, rounds=5, versions=10_000),
    }[size]
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="seo-bench-delta-")) if own else work
    try:
        n = versions or sizes["versions"]
        grown = growth(
            versions=n,
            checkpoint_interval=10,
            work=work,
            windows=tuple(sorted({100, 1_000, 2_000, 5_000, 10_000, n} - {v for v in (1_000, 2_000, 5_000, 10_000) if v > n})),
        )
        out = {
            "throughput": throughput(
                n_files=sizes["n_files"],
                rows_per_file=sizes["rows_per_file"],
                files_per_trigger=sizes["files_per_trigger"],
                rounds=sizes["rounds"],
                work=work,
            ),
            "growth": grown,
            "growth_series": growth_series(versions=n, s3_versions=min(n, 2_000), work=work),
            "size": size,
            "date": time.strftime("%Y-%m-%d"),
        }
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    import sys

    result = main(sys.argv[1] if len(sys.argv) > 1 else "small")
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/delta.json").write_text(json.dumps(result, indent=1))
