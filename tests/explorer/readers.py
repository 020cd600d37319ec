"""What each reader sees of a table: the ids of its rows, counted (a Counter per reader).

Readers: vanilla ``spark.read`` (through ``_spark_metadata``; not for a private manifest),
``read.arrow`` at the latest batch and ``as_of`` every retained batch, delta-rs at every Delta
version and pyiceberg at every Iceberg snapshot - each on its own, nothing shared with the
library's writer side.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

Ids = Counter  # id -> how many rows carry it


def has_table(table: Path) -> bool:
    """The sink created a table there (its identity file)."""
    return (table / "_seo" / "table").exists()


def readable(table: Path) -> bool:
    """The table has a manifest its readers open: a batch was committed. A table whose first
    run failed holds its identity only, and readers and ``seo`` say there is no table."""
    return has_table(table) and ((table / "_spark_metadata").is_dir() or (table / "_seo" / "manifest").is_dir())


def stamp(table: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file under the table directory with its size and modification time (writers'
    heartbeats left out): equal stamps, equal answers from every reader. An open sink may still
    work in the background (compaction, log cleanup): a file gone while listed is left out."""
    out = []
    for root, dirs, files in os.walk(table):
        dirs[:] = [d for d in dirs if d != "heartbeats"]
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:  # a writer's temp file, gone since the listing
                continue
            out.append((os.path.join(root, name), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def vanilla(spark: Any, table: Path, fmt: str) -> Ids:
    """``spark.read`` as any Spark user reads the directory (``_spark_metadata`` if there)."""
    if not table.exists() or not any(not p.name.startswith(("_", ".")) for p in table.iterdir()):
        return Counter()
    reader = spark.read
    if fmt == "json":
        reader = reader.schema("id STRING").format("json")
    else:
        reader = reader.format("parquet")
    return Counter(r.id for r in reader.load(str(table)).select("id").collect())


def arrow(table: Path, as_of: int | None = None) -> Ids:
    from streaming_exactly_once import read

    return Counter(read.arrow(str(table), as_of=as_of, columns=["id"]).column("id").to_pylist())


def retained_batches(table: Path) -> list[int]:
    from streaming_exactly_once import read

    return [b.batch_id for b in read.batches(str(table)) if b.readable]


def delta_versions(table: Path) -> list[int]:
    log = table / "_delta_log"
    if not log.is_dir():
        return []
    return sorted(int(p.name.split(".")[0]) for p in log.iterdir() if p.name.endswith(".json") and p.name[0].isdigit())


def delta(table: Path, version: int | None = None) -> Ids:
    from deltalake import DeltaTable

    dt = DeltaTable(str(table), version=version)
    return Counter(dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def delta_version_of(table: Path, batch: int) -> int | None:
    from streaming_exactly_once import read

    return read.delta_version(str(table), as_of=batch)


def iceberg_snapshots(table: Path) -> list[tuple[int, int | None]]:
    """(snapshot id, its batch id or None) of every retained snapshot, oldest first."""
    hint = table / "metadata" / "version-hint.text"
    if not hint.exists():
        return []
    meta = json.loads((table / "metadata" / f"v{int(hint.read_text())}.metadata.json").read_text())
    out = []
    for snap in sorted(meta.get("snapshots", []), key=lambda s: (s["sequence-number"], s["timestamp-ms"])):
        batch = snap.get("summary", {}).get("seo.batch-id")
        out.append((snap["snapshot-id"], int(batch) if batch is not None else None))
    return out


def iceberg(table: Path, snapshot_id: int | None = None) -> Ids:
    from pyiceberg.table import StaticTable

    static = StaticTable.from_metadata(str(table))
    return Counter(static.scan(snapshot_id=snapshot_id, selected_fields=("id",)).to_arrow().column("id").to_pylist())


def iceberg_snapshot_of(table: Path, batch: int) -> int:
    from streaming_exactly_once import read

    return read.iceberg_snapshot(str(table), as_of=batch)
