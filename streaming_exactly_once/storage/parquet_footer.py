"""A Parquet file's footer, read from its end through the table's storage - one read of its last
64 KiB, a second where the footer is larger - without reading its data: what the Delta and
Iceberg commits count rows with and check files by, and ``seo verify`` compares schemas with.

A Parquet file ends with its footer (Thrift ``FileMetaData``), the footer's length (4 bytes,
little-endian) and the magic ``PAR1``."""

from __future__ import annotations

from typing import Any

from .base import Storage

MAGIC = b"PAR1"
FIRST_READ = 64 * 1024


def read_footer(storage: Storage, path: str) -> Any:  # a pyarrow FileMetaData, or None
    """The footer of the Parquet file at ``path`` (None: not a complete Parquet file - no magic,
    or a footer that does not parse)."""
    return footer_of_tail(storage, path, storage.read_tail(path, FIRST_READ))


def footer_of_tail(storage: Storage, path: str, tail: bytes) -> Any:  # a pyarrow FileMetaData, or None
    """The footer of ``path`` from ``tail``, its last bytes already read (read once more when the
    footer is larger than the tail)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(tail) < 12 or tail[-4:] != MAGIC:
        return None
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 > len(tail):
        tail = storage.read_tail(path, length + 8)
    try:
        return pq.read_metadata(pa.BufferReader(tail[-(length + 8) :]))
    except (OSError, ValueError):
        return None
