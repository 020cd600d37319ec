"""Quickstart (foundation stage): a manifest round trip that plain Spark honours.

Writes three committed batches and one orphan file into a table under ``.work/quickstart``,
then shows that ``spark.read.parquet(table)`` returns exactly the committed rows.
Replaced by the streaming quickstart once the sink lands.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage


def main() -> None:
    table = Path(".work/quickstart/table").resolve()
    shutil.rmtree(table.parent, ignore_errors=True)
    storage = open_storage(str(table))
    log = ManifestLog(storage)
    for batch in range(3):
        rel = f"part-{batch:05d}.parquet"
        table.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": list(range(batch * 5, batch * 5 + 5))}), table / rel)
        info = storage.info(rel)
        log.add(batch, [ManifestEntry.for_file(storage.uri(rel), size=info.size, modification_time=info.mtime_ms)])
        print(f"committed batch {batch}: {rel}")
    pq.write_table(pa.table({"id": [-1]}), table / "part-orphan.parquet")
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    rows = sorted(r.id for r in spark.read.parquet(str(table)).collect())
    assert rows == list(range(15)), rows
    print(f"spark.read.parquet({table}) -> {len(rows)} rows, orphan ignored: OK")
    spark.stop()


if __name__ == "__main__":
    main()
