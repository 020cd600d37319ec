"""Read the manifest entries of a snapshot as columns, fast enough for a million entries.

Which files make up the snapshot - the compact file and the deltas after it, as of a batch - is
decided by ``ManifestLog`` alone. Each file is then read the fastest safe way:

1. a compact file with a matching Parquet index (``manifest.manifest_index``): read the index;
2. otherwise, with pyarrow installed, Arrow's multi-threaded JSON reader with the fixed
   ``SinkFileStatus`` schema;
3. otherwise - or when Arrow rejects a file - the strict pure-Python parser of the log layer,
   which also produces the precise error (file, batch, line) for a damaged file.

With pyarrow the result is Arrow arrays; without it, Python lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..log.compaction import is_compaction_batch
from ..manifest.manifest_index import parse_entries_arrow, read_index
from ..manifest.manifest_log import ManifestLog


@dataclass
class ManifestColumns:
    paths: Any  # pyarrow.StringArray or list[str], URI-encoded
    sizes: Any
    mtimes: Any
    arrow: bool


def _python_columns(log: ManifestLog, data: bytes, batch_id: int):
    entries = [e for e in log.decode(data, batch_id=batch_id) if not e.is_dir]
    return [e.path for e in entries], [e.size for e in entries], [e.modification_time for e in entries]


def scan_manifest(log: ManifestLog, as_of: int | None = None) -> ManifestColumns:
    """Every non-directory entry visible as of batch ``as_of`` (default: the latest)."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        pa = None
    ids = log.valid_batches(as_of)
    chunks: list[tuple[Any, Any, Any]] = []
    if ids:
        context = f"needed to read the table as of batch {ids[-1]} (compact interval {log.interval})"
        for batch_id in ids:
            if pa is not None and is_compaction_batch(batch_id, log.interval):
                index = read_index(log.storage, batch_id, log)
                if index is not None:
                    chunks.append((index.column("path"), index.column("size"), index.column("modificationTime")))
                    continue
            try:
                data = log.storage.read_bytes(log.path(batch_id))
            except FileNotFoundError:
                log.read(batch_id, context=context)  # raises MissingBatchError with the context
                raise
            table = None
            if pa is not None and (data.startswith(b"v1\n") or data == b"v1"):
                newline = data.find(b"\n")
                table = parse_entries_arrow(b"" if newline < 0 else data[newline + 1 :])
            if table is not None:
                table = table.filter(pc.invert(table.column("isDir")))
                chunks.append((table.column("path"), table.column("size"), table.column("modificationTime")))
            else:
                paths, sizes, mtimes = _python_columns(log, data, batch_id)
                if pa is not None:
                    chunks.append((pa.array(paths, pa.string()), pa.array(sizes, pa.int64()), pa.array(mtimes, pa.int64())))
                else:
                    chunks.append((paths, sizes, mtimes))
    if pa is None:
        return ManifestColumns(
            [p for c in chunks for p in c[0]], [s for c in chunks for s in c[1]], [m for c in chunks for m in c[2]], False
        )

    def concat(values, kind):
        arrays = []
        for v in values:
            arrays.extend(v.chunks if isinstance(v, pa.ChunkedArray) else [v])
        return pa.chunked_array(arrays, type=kind).combine_chunks() if arrays else pa.array([], kind)

    return ManifestColumns(
        concat([c[0] for c in chunks], pa.string()),
        concat([c[1] for c in chunks], pa.int64()),
        concat([c[2] for c in chunks], pa.int64()),
        True,
    )
