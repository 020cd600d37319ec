"""The ``iceberg`` commit step's cost as the table's history grows (commit layer, no Spark).

    python -m benchmarks.bench_iceberg_step [--series expiry|history|both] [--out FILE]

Commits one-file batches (a small Parquet file each, partitioned by ``p``) one after the other
through ``CommitIceberg`` on the path-based default catalog on local disk, no snapshot expiry.
A fresh commit runs the step's ``execute`` alone (``CommitSequence.run``: read the current
metadata, the footer, write manifests, manifest list and the next metadata file, sync); a
roll-forward runs ``verify`` first (one read of the current metadata), timed separately here.
At each mark it reports the median and p95 over the batches just before the mark, plus what
the step reads and writes at that size: the metadata file (it holds
every retained snapshot: Iceberg's own growth, which expiry bounds) and the manifest list of
the current snapshot (bounded by manifest merging, ``commit.manifest.min-count-to-merge``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from streaming_exactly_once.commit.protocol.step import StepContext
from streaming_exactly_once.commit.table_steps.format_step import CommitIceberg
from streaming_exactly_once.iceberg import IcebergFile, app_id
from streaming_exactly_once.storage import open_storage

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "v", "type": "string", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
WINDOW = 50  # batches before each mark whose step times are summarised


def _parquet(batch: int) -> bytes:
    buf = io.BytesIO()
    ids = list(range(batch * 10, batch * 10 + 10))
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"row-{i}" for i in ids]}), buf)
    return buf.getvalue()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def pad_history(root: Path, extra: int) -> None:
    """Add ``extra`` old snapshots (another app's, so no batch of ours) as the next metadata version."""
    storage = open_storage(str(root))
    version = int(storage.read_bytes("metadata/version-hint.text"))
    while storage.exists(f"metadata/v{version + 1}.metadata.json"):
        version += 1
    meta = json.loads(storage.read_bytes(f"metadata/v{version}.metadata.json"))
    template = meta["snapshots"][0]
    first_ts = template["timestamp-ms"]
    padding = []
    for i in range(extra):
        snap = dict(template, **{"snapshot-id": 10**15 + i, "timestamp-ms": first_ts - extra + i, "sequence-number": 0})
        snap["summary"] = dict(template["summary"], **{"seo.app-id": "padding", "seo.batch-id": str(i)})
        snap.pop("parent-snapshot-id", None)
        padding.append(snap)
    meta["snapshots"] = padding + meta["snapshots"]
    meta["snapshot-log"] = [{"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in padding] + meta["snapshot-log"]
    storage.put_if_absent(f"metadata/v{version + 1}.metadata.json", json.dumps(meta).encode())
    storage.atomic_write("metadata/version-hint.text", str(version + 1).encode())


def run(root: Path, batches: int, marks: list[int], *, expire_every: int = 0, keep: int = 100, pad: tuple[int, int] | None = None) -> list[dict]:
    storage = open_storage(str(root))
    ctx = StepContext(storage=storage, logs=None)  # type: ignore[arg-type]  # the step reads no log
    app = app_id("bench")
    verify_ms: list[float] = []
    execute_ms: list[float] = []
    out = []
    started = time.perf_counter()
    for b in range(batches):
        if pad is not None and b == pad[0]:
            pad_history(root, pad[1])
            ctx.iceberg_targets.clear()
        if expire_every and b and b % expire_every == 0:
            target = ctx.iceberg_targets[None]
            table = target.load()
            assert table is not None
            target.expire_snapshots([s.snapshot_id for s in table.metadata.snapshots[:-keep]])
        path = f"p={b % 4}/part-{b:06d}.c000.snappy.parquet"
        storage.put_if_absent(path, _parquet(b))
        info = storage.info(path)
        s = CommitIceberg(
            batch_id=b,
            app_id=app,
            partition_by=("p",),
            schema=SCHEMA,
            files=[IcebergFile(path, info.size, info.mtime_ms)],
            info={"queryId": "bench", "sparkBatchId": str(b)},
        )
        t0 = time.perf_counter()
        s.execute(ctx)  # a fresh commit: CommitSequence executes without verifying first
        t1 = time.perf_counter()
        assert s.verify(ctx)  # what a roll-forward reads first
        t2 = time.perf_counter()
        execute_ms.append((t1 - t0) * 1000)
        verify_ms.append((t2 - t1) * 1000)
        if b + 1 in marks:
            target = ctx.iceberg_targets[None]
            table = target.load(refresh=False)
            assert table is not None
            snapshot = table.metadata.current_snapshot()
            assert snapshot is not None
            window = slice(max(0, b + 1 - WINDOW), b + 1)
            total = execute_ms[window]
            metadata_file = root / "metadata" / table.metadata_location.rsplit("/", 1)[-1]
            row = {
                "batches": b + 1,
                "snapshots": len(table.metadata.snapshots),
                "step_median_ms": round(statistics.median(total), 1),
                "step_p95_ms": round(_pct(total, 0.95), 1),
                "verify_median_ms": round(statistics.median(verify_ms[window]), 1),
                "metadata_file_kb": round(metadata_file.stat().st_size / 1024, 1),
                "manifests_in_list": len(snapshot.manifests(table.io)),
                "metadata_files_kept": len([n for n in os.listdir(root / "metadata") if n.endswith(".metadata.json")]),
                "elapsed_s": round(time.perf_counter() - started, 1),
            }
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--series", default="both", choices=["expiry", "history", "both"])
    p.add_argument("--batches", type=int, default=10_000, help="batches of the expiry series")
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="seo-iceberg-bench-") as tmp:
        if args.series in ("expiry", "both"):
            print("expiry every 100 batches, newest 100 snapshots kept:", flush=True)
            marks = [m for m in (100, 1_000, 10_000) if m <= args.batches]
            results["expiry"] = run(Path(tmp) / "expiry", args.batches, marks, expire_every=100, keep=100)
        if args.series in ("history", "both"):
            print("no expiry (history padded to 10,000 snapshots after batch 1,000):", flush=True)
            results["history"] = run(Path(tmp) / "history", 1_100, [100, 1_000, 1_100], pad=(1_000, 8_900))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
