"""Log-layer costs on local disk: ``add`` of small batch files, and reading a 1M-entry compact.

python -m benchmarks.bench_log [--adds 1000] [--entries 1000000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from streaming_exactly_once.log.batch_log import BatchLog
from streaming_exactly_once.log.codec import DictCodec
from streaming_exactly_once.manifest.entry import ManifestEntry, ManifestEntryCodec
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage

from .stats import summary


def bench_add(root: Path, n: int) -> dict:
    storage = open_storage(str(root / "adds"))
    log = BatchLog(storage, "commits", DictCodec())
    record = {"batchId": 0, "queryId": "c578917c-43fe-4830-b2ab-4ce71a4c834d", "rows": 200000, "files": 10}
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        log.add(i, [dict(record, batchId=i)])
        times.append((time.perf_counter() - t0) * 1000)
    return {"what": "BatchLog.add of a ~120-byte batch file (fsync'd, exclusive)", "ms": summary(times)}


def bench_compact_read(root: Path, entries: int) -> dict:
    storage = open_storage(str(root / "compact"))
    codec = ManifestEntryCodec()
    template = "file:///data/events/day=2024-01-%02d/part-%05d-6f1f4e1c-2d7e-4c1b-9c9e-{:08d}.c000.snappy.parquet"
    lines = []
    for i in range(entries):
        e = ManifestEntry(path=template.format(i) % (i % 28 + 1, i % 200), size=1_000_000 + i, modification_time=1795313165250 + i)
        lines.append(json.dumps(codec.to_json(e), separators=(",", ":")).encode())
    storage.makedirs("_spark_metadata")
    data = b"v1" + b"".join(b"\n" + line for line in lines)
    (Path(storage.uri("_spark_metadata/9.compact")[len("file://") :])).write_bytes(data)
    runs = []
    for _ in range(3):
        log = ManifestLog(storage)
        t0 = time.perf_counter()
        files = log.files()
        runs.append((time.perf_counter() - t0) * 1000)
        assert len(files) == entries
    return {"what": f"ManifestLog.files() over one {entries:,}-entry compact file ({len(data) / 1e6:.0f} MB)", "ms": summary(runs)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--adds", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--out", default="benchmarks/results/log.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="seo-bench-") as tmp:
        results = {"add": bench_add(Path(tmp), args.adds), "compact_read": bench_compact_read(Path(tmp), args.entries)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    for key, value in results.items():
        ms = value["ms"]
        print(f"{key:13s} median {ms['median']:9.2f} ms  p99 {ms['p99']:9.2f} ms  ({value['what']})")
    return results


if __name__ == "__main__":
    main()
