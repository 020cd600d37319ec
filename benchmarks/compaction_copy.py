"""One compaction batch of the manifest with and without a storage-side copy of the previous
compact file (#14, cost flat with history), on local disk and on S3 (moto's server on 127.0.0.1).

    python -m benchmarks.compaction_copy [--entries 100000,250000] [--repeat 3] [--s3] [--local]

The manifest is seeded with one ``9.compact`` of N entries (as ``bench_commit.seed_manifest``
writes them), deltas 10..18 of 10 entries follow, and ``add(19)`` - the compaction - is timed.
"without copy" is the same storage with its ``ComposedFiles`` capability switched off (the
streamed path: read the previous compact file, write it out). Prints one line per case: the
median and the spread of ``repeat`` runs, each on a fresh directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

LINE = (
    '{"path":"%s/day=%d/part-%012d-seed.c000.snappy.parquet","size":1000000,"isDir":false,'
    '"modificationTime":1795313165250,"blockReplication":1,"blockSize":33554432,"action":"add"}'
)


def _seeded(storage: Any, entries: int) -> bytes:
    root = storage.root_uri
    return ("v1" + "".join("\n" + LINE % (root, i % 28, i) for i in range(entries))).encode()


def compaction_ms(storage: Any, entries: int, *, copy: bool) -> float:
    from streaming_exactly_once.manifest.entry import ManifestEntry
    from streaming_exactly_once.manifest.manifest_log import ManifestLog

    storage.supports_composed_files = copy  # this storage object only: the capability switched off
    storage.put_if_absent("_spark_metadata/9.compact", _seeded(storage, entries))
    log = ManifestLog(storage)
    for b in range(10, 20):
        entries_b = [ManifestEntry.for_file(f"{storage.root_uri}/day=1/part-{b}-{i}.parquet", size=1, modification_time=1) for i in range(10)]
        t0 = time.perf_counter()
        log.add(b, entries_b)
        elapsed = (time.perf_counter() - t0) * 1000
    return elapsed  # the last one, batch 19, is the compaction


def _local(entries: int, copy: bool) -> float:
    from streaming_exactly_once.storage import open_storage

    with tempfile.TemporaryDirectory(prefix="seo-copy-bench-") as work:
        return compaction_ms(open_storage(work), entries, copy=copy)


def _s3_runner() -> tuple[Any, Callable[[int, bool], float]]:
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}
    import boto3

    bucket = f"seo-bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=options["endpoint_url"], region_name="us-east-1").create_bucket(Bucket=bucket)

    def run(entries: int, copy: bool) -> float:
        from streaming_exactly_once.storage import open_storage

        return compaction_ms(open_storage(f"s3://{bucket}/{uuid.uuid4().hex}", options), entries, copy=copy)

    return server, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", default="100000,250000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--s3", action="store_true")
    parser.add_argument("--local", action="store_true")
    args = parser.parse_args(argv)
    runners = []
    server = None
    if args.local or not args.s3:
        runners.append(("local", _local))
    if args.s3:
        server, s3_run = _s3_runner()
        runners.append(("s3 (moto)", s3_run))
    try:
        for name, run in runners:
            for entries in (int(e) for e in args.entries.split(",")):
                for copy in (False, True):
                    times = sorted(run(entries, copy) for _ in range(args.repeat))
                    label = "with copy   " if copy else "without copy"
                    spread = f"(min {times[0]:.1f}, max {times[-1]:.1f})"
                    print(f"{name:>9} {entries:>9,} entries {label}: median {statistics.median(times):7.1f} ms  {spread}", flush=True)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
