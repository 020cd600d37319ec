"""A columnar cache of one ``.compact`` manifest file, so readers need not parse its JSON.

``_spark_metadata/N.compact`` holds every live entry as JSON text: about 230 bytes per file,
so a table with a million files has a 230 MB compact file, and parsing it takes longer than a
second even with Arrow's multi-threaded JSON reader. The index is the same entries as Parquet::

    _seo/manifest-index/N.parquet
        columns:  path (string, URI-encoded as in the manifest), size (int64), modificationTime (int64)
        metadata: seo.index.version = "1", seo.source = "N.compact",
                  seo.source.size = <bytes of N.compact>, seo.source.mtime = <its mtime in ms>

It is derived data, never a source of truth: a compact file is written once and never changed,
so an index whose recorded size and mtime match the compact file's is that file's content; any
mismatch (or a missing or unreadable index) and readers parse the JSON as Spark does. The sink
writes it in the background after each compaction; ``seo index`` builds it for any table.
Needs pyarrow; without it nothing is written and readers parse JSON.
"""

from __future__ import annotations

import io
import logging
from typing import Any

from ..storage.base import Storage
from .manifest_log import ManifestLog

log = logging.getLogger("streaming_exactly_once.manifest_index")

INDEX_DIR = "_seo/manifest-index"
VERSION = "1"


def index_path(compact_id: int) -> str:
    return f"{INDEX_DIR}/{compact_id}.parquet"


def parse_entries_arrow(body: bytes) -> Any:  # a pyarrow Table or None
    """Arrow table (path, size, isDir, modificationTime) of a manifest body, or None if unusable."""
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        return None
    schema = pa.schema(
        [
            ("path", pa.string()),
            ("size", pa.int64()),
            ("isDir", pa.bool_()),
            ("modificationTime", pa.int64()),
            ("blockReplication", pa.int64()),
            ("blockSize", pa.int64()),
            ("action", pa.string()),
        ]
    )
    if not body.strip():
        return pa.table({n: pa.array([], t) for n, t in zip(schema.names, schema.types, strict=True)})
    try:
        table = pj.read_json(
            io.BytesIO(body),
            read_options=pj.ReadOptions(block_size=max(1 << 20, min(len(body) // 2 + 1, 64 << 20))),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if any(table.column(name).null_count for name in schema.names):
        return None
    return table


def write_index(storage: Storage, compact_id: int, log_: ManifestLog | None = None) -> bool:
    """Build the index of ``<compact_id>.compact``; False if pyarrow is missing or the file is bad."""
    try:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        return False
    log_ = log_ or ManifestLog(storage)
    name = f"{compact_id}.compact"
    path = f"{log_.directory}/{name}"
    info = storage.info(path)
    data = storage.read_bytes(path)
    newline = data.find(b"\n")
    if not data.startswith(b"v1"):
        return False
    table = parse_entries_arrow(b"" if newline < 0 else data[newline + 1 :])
    if table is None:
        return False
    table = table.filter(pc.invert(table.column("isDir"))).select(["path", "size", "modificationTime"])
    table = table.replace_schema_metadata(
        {
            "seo.index.version": VERSION,
            "seo.source": name,
            "seo.source.size": str(info.size),
            "seo.source.mtime": str(info.mtime_ms),
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd", use_dictionary=["path"])
    try:
        storage.put_if_absent(index_path(compact_id), buffer.getvalue())
    except FileExistsError:
        pass
    return True


def read_index(storage: Storage, compact_id: int, log_: ManifestLog) -> Any:  # a pyarrow Table or None
    """The index table if it exists and matches the compact file, else None."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        data = storage.read_bytes(index_path(compact_id))
        info = storage.info(f"{log_.directory}/{compact_id}.compact")
        table = pq.read_table(io.BytesIO(data))
    except FileNotFoundError:
        return None
    except Exception:  # an unreadable cache is no cache
        log.warning("ignoring unreadable manifest index %s", storage.uri(index_path(compact_id)))
        return None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if (
        meta.get("seo.index.version") != VERSION
        or meta.get("seo.source") != f"{compact_id}.compact"
        or meta.get("seo.source.size") != str(info.size)
        or meta.get("seo.source.mtime") != str(info.mtime_ms)
    ):
        return None
    return table


def delete_stale_indexes(storage: Storage, log_: ManifestLog) -> list[str]:
    """Remove indexes whose compact file retention has deleted (a few files: one per compact)."""
    removed = []
    for entry in storage.list_dir(INDEX_DIR):
        stem = entry.name.split(".", 1)[0]
        if stem.isdigit() and not storage.exists(f"{log_.directory}/{stem}.compact"):
            storage.delete(entry.path)
            removed.append(entry.name)
    return removed
