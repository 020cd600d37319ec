"""Iceberg batches without Spark: Parquet files staged by hand, as the sink would stage them, and
what an Iceberg reader (pyiceberg alone, path-based) sees of the table."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from streaming_exactly_once.commit.protocol.step import StepContext
from streaming_exactly_once.commit.table_steps.format_step import CommitIceberg
from streaming_exactly_once.iceberg import IcebergCatalogRef, IcebergFile, IcebergTarget, app_id
from streaming_exactly_once.storage.base import Storage
from streaming_exactly_once.table.table_logs import TableLogs

#: Spark schema JSON of the batches below (``id`` long, partition column ``p`` string).
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
APP = app_id("5b0c0000-0000-0000-0000-00000000beef")


def parquet(ids: list[int], **columns: pa.Array) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), **columns}), buf)
    return buf.getvalue()


def stage(storage: Storage, path: str, data: bytes) -> IcebergFile:
    storage.put_if_absent(path, data)
    info = storage.info(path)
    rows = pq.read_metadata(io.BytesIO(data)).num_rows if data[-4:] == b"PAR1" else None
    return IcebergFile(path, info.size, info.mtime_ms, rows)  # the step reads rows itself; direct commits need them


def batch_files(storage: Storage, batch: int, *, tag: str = "", partition: str = "p=a") -> list[IcebergFile]:
    """Batch ``batch``'s two files (ids ``batch*100 ..``); ``tag`` keeps two writers' names apart."""
    ids = ids_of(batch)
    return [
        stage(storage, f"{partition}/part-{part:05d}-{batch}{tag}.c000.snappy.parquet", parquet(chunk))
        for part, chunk in enumerate((ids[: len(ids) // 2], ids[len(ids) // 2 :]))
    ]


def ids_of(batch: int, rows: int = 4) -> list[int]:
    return list(range(batch * 100, batch * 100 + rows))


def step(batch: int, files: list[IcebergFile], *, schema: str | None = SCHEMA, partition_by=("p",), catalog=None, **kw: Any) -> CommitIceberg:
    return CommitIceberg(
        batch_id=batch,
        app_id=APP,
        partition_by=tuple(partition_by),
        schema=schema,
        files=files,
        catalog=catalog or IcebergCatalogRef(),
        info={"queryId": "q-1", "sparkBatchId": str(batch)},
        **kw,
    )


def context(storage: Storage, catalogs: dict[str, dict[str, str]] | None = None) -> StepContext:
    return StepContext(storage=storage, logs=TableLogs.open(storage), iceberg_catalogs=dict(catalogs or {}))


def run(s: CommitIceberg, ctx: StepContext) -> None:
    """What ``CommitSequence`` does with one step: verify, else execute, then verify again."""
    if not s.verify(ctx):
        s.execute(ctx)
    assert s.verify(ctx)


def target(storage: Storage, **kw: Any) -> IcebergTarget:
    return IcebergTarget(storage, APP, **kw)


def metadata_json(table: Path) -> dict[str, Any]:
    """The current metadata file of a path-based table, parsed with json (the hint, then newer)."""
    meta = table / "metadata"
    version = int((meta / "version-hint.text").read_text())
    while (meta / f"v{version + 1}.metadata.json").exists():
        version += 1
    return json.loads((meta / f"v{version}.metadata.json").read_text())


def our_snapshots(table: Path) -> dict[int, int]:
    """{batch id: snapshot id} of the retained snapshots carrying our app id."""
    out: dict[int, int] = {}
    for snap in metadata_json(table)["snapshots"]:
        summary = snap.get("summary", {})
        if summary.get("seo.app-id") == APP:
            batch = int(summary["seo.batch-id"])
            assert batch not in out, f"batch {batch} is in two snapshots"
            out[batch] = snap["snapshot-id"]
    return out


def iceberg_ids(location: str, *, snapshot_id: int | None = None, column: str = "id") -> Counter[Any]:
    """Row ids as pyiceberg reads the table by path (its version hint) - no catalog, no our code."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(location)
    return Counter(table.scan(snapshot_id=snapshot_id).to_arrow().column(column).to_pylist())
