"""The ``delta`` and ``iceberg`` commit steps side by side, as history grows (commit layer, no Spark).

    python -m benchmarks.bench_formats_step [--batches 10000] [--keep 100] [--out FILE]

One ``TableCommitter`` with ``format=["delta", "iceberg"]`` (path-based Iceberg catalog, snapshot
expiry keeping ``--keep`` snapshots inside each commit; Delta with a checkpoint every 10
versions and a 30-second log retention, which is what keeps the Delta step flat, see
``bench_delta``) commits one-file batches one after the other on local disk. Both steps run in
the same commit sequence of the same batch, so their times are measured on the same machine
at the same moment. At each mark: the median and p95 of each step over the window of batches
before it, the commit's total (without staging), and the size of what each format reads per
commit (the Iceberg metadata file, the ``_delta_log`` listing).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile, TableCommitter
from streaming_exactly_once.delta.target import DeltaSettings
from streaming_exactly_once.iceberg.settings import IcebergSettings
from streaming_exactly_once.storage import open_storage

QUERY = "bbbbbbbb-0000-0000-0000-00000000bench"
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


def _parquet(ids: list[int]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
    return buf.getvalue()


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 1), "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1)}


def run(root: Path, batches: int, marks: list[int], *, keep: int, window: int = 100) -> list[dict]:
    storage = open_storage(str(root))
    options = CommitterOptions(
        heartbeat=False,
        partition_by=("p",),
        delta=DeltaSettings(checkpoint_interval=10, log_retention_ms=30_000),
        iceberg=IcebergSettings(snapshots_to_keep=keep),
    )
    committer = TableCommitter(storage, options)
    committer.open()
    times: dict[str, list[float]] = {"delta": [], "iceberg": [], "commit": []}
    out = []
    started = time.perf_counter()
    try:
        for b in range(batches):
            attempt = committer.begin(QUERY, b, mode="rename")
            rel = f"p={b % 4}/part-00000-{attempt.attempt}-{b}.c000.snappy.parquet"
            staged = f"{attempt.staging_dir}/data/{rel}"
            storage.put_if_absent(staged, _parquet([b]))
            info = storage.info(staged)
            files = [StagedFile(final=rel, size=info.size, mtime_ms=info.mtime_ms, staged=staged)]
            inputs = [InputFile(source=0, path=f"file:///in/{b}.csv", timestamp=1)]
            result = committer.commit(attempt, files, input_files=inputs, num_rows=1, schema=SCHEMA)
            times["delta"].append(result.timings["delta"])
            times["iceberg"].append(result.timings["iceberg"])
            times["commit"].append(sum(v for k, v in result.timings.items() if k != "stage"))
            if b + 1 in marks:
                hint = int((root / "metadata" / "version-hint.text").read_text())
                row = {
                    "batches": b + 1,
                    **{f"{k}_ms": _stats(v[max(0, b + 1 - window) : b + 1]) for k, v in times.items()},
                    "iceberg_metadata_kb": round((root / "metadata" / f"v{hint}.metadata.json").stat().st_size / 1024, 1),
                    "delta_log_files": len(list((root / "_delta_log").iterdir())),
                    "elapsed_s": round(time.perf_counter() - started, 1),
                }
                out.append(row)
                print(json.dumps(row), flush=True)
    finally:
        committer.close()
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batches", type=int, default=10_000)
    p.add_argument("--keep", type=int, default=100, help="iceberg_snapshots_to_keep")
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    marks = sorted({m for m in (100, 500, 1_000, 2_000, 5_000, 10_000) if m <= args.batches} | {args.batches})
    with tempfile.TemporaryDirectory(prefix="seo-formats-bench-") as tmp:
        rows = run(Path(tmp) / "t", args.batches, marks, keep=args.keep)
    if args.out:
        Path(args.out).write_text(json.dumps({"batches": args.batches, "keep": args.keep, "rows": rows}, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
