"""Readers at scale: committed file list and first-row latency for 10k / 100k / 1M manifest entries.

A synthetic table has one compact manifest file with N entries in 28 partitions. For the file
list the data files need not exist (neither reader opens them); for first-row latency every
entry is a hard link to one small Parquet file, so both readers open real files.

Compared in the same process:
* ``read.files`` with the JSON manifest (Arrow JSON reader) and with the Parquet manifest index;
* Spark's reader planning: ``spark.read.schema(...).parquet(table).inputFiles()`` (it builds
  ``MetadataLogFileIndex`` from the same manifest), and ``limit(1).collect()`` for the first row.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from .stats import summary


def make_table(root: Path, n: int, *, real_files: bool) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = root / f"table-{n}"
    (table / "_spark_metadata").mkdir(parents=True)
    seed = root / "seed.parquet"
    if not seed.exists():
        pq.write_table(pa.table({"id": [1, 2, 3], "v": [0.5, 1.5, 2.5]}), seed)
    size = seed.stat().st_size
    line = (
        '{"path":"file://%s/day=2024-01-%%02d/part-%%05d-6f1f4e1c-2d7e-4c1b-9c9e-%%012d.c000.snappy.parquet",'
        '"size":%d,"isDir":false,"modificationTime":1795313165250,"blockReplication":1,"blockSize":33554432,"action":"add"}'
    ) % (table, size)
    with open(table / "_spark_metadata" / "9.compact", "w") as fh:
        fh.write("v1")
        for i in range(n):
            fh.write("\n" + line % (i % 28 + 1, i % 200, i))
    if real_files:
        for day in range(1, 29):
            (table / f"day=2024-01-{day:02d}").mkdir()
        source = seed
        for i in range(n):
            if i % 50_000 == 0:  # a file may have at most 65,000 hard links
                source = root / f"seed-{i}.parquet"
                if not source.exists():
                    shutil.copy(seed, source)
            os.link(source, table / f"day=2024-01-{i % 28 + 1:02d}" / f"part-{i % 200:05d}-6f1f4e1c-2d7e-4c1b-9c9e-{i:012d}.c000.snappy.parquet")
    return table


def _time(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def run(sizes: list[int], *, repeat: int = 3, first_row_max: int = 100_000, work: Path | None = None) -> dict[str, Any]:
    from streaming_exactly_once import read
    from streaming_exactly_once.manifest.manifest_index import index_path, write_index
    from streaming_exactly_once.storage import open_storage

    from .spark_env import spark_session

    spark = spark_session("seo-bench-readers")
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="seo-bench-readers-")) if own else work
    results: dict[str, Any] = {}
    try:
        for n in sizes:
            real = n <= first_row_max
            table = make_table(work, n, real_files=real)
            storage = open_storage(str(table))
            row: dict[str, Any] = {"entries": n}
            storage.delete(index_path(9))
            row["ours_files_json_s"] = summary(_time(lambda table=table: read.files(str(table)), repeat))
            t0 = time.perf_counter()
            write_index(storage, 9)
            row["index_build_s"] = time.perf_counter() - t0
            row["ours_files_index_s"] = summary(_time(lambda table=table: read.files(str(table)), repeat))
            row["spark_planning_s"] = summary(
                _time(lambda table=table: spark.read.schema("id LONG, v DOUBLE").parquet(str(table)).inputFiles(), repeat)
            )
            row["speedup_json"] = row["spark_planning_s"]["median"] / row["ours_files_json_s"]["median"]
            row["speedup_index"] = row["spark_planning_s"]["median"] / row["ours_files_index_s"]["median"]
            if real:
                row["ours_first_row_s"] = summary(_time(lambda table=table: read.dataset(str(table)).head(1), repeat))
                row["spark_first_row_s"] = summary(_time(lambda table=table: spark.read.parquet(str(table)).limit(1).collect(), repeat))
            results[str(n)] = row
            print(
                f"  readers {n:>9,} entries: ours {row['ours_files_json_s']['median']:.3f} s (json) "
                f"{row['ours_files_index_s']['median']:.3f} s (index), spark planning {row['spark_planning_s']['median']:.3f} s "
                f"-> {row['speedup_index']:.1f}x",
                flush=True,
            )
            shutil.rmtree(table, ignore_errors=True)
    finally:
        spark.stop()
        if own:
            shutil.rmtree(work, ignore_errors=True)
    return results


def main(size: str = "small") -> dict[str, Any]:
    sizes = {"small": [10_000, 100_000], "full": [10_000, 100_000, 1_000_000]}[size]
    return run(sizes, first_row_max=100_000)


if __name__ == "__main__":
    import json
    import sys

    out = main(sys.argv[1] if len(sys.argv) > 1 else "small")
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/readers.json").write_text(json.dumps(out, indent=1))
