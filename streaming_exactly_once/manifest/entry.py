"""One manifest line: Spark's ``SinkFileStatus``, field for field and in Spark's order.

Bytes of one entry (one line of ``_spark_metadata/N``)::

    {"path":"file:///data/events/day=2024-01-01/part-00000-<uuid>.c000.snappy.parquet","size":903,"isDir":false,"modificationTime":1795313165250,"blockReplication":1,"blockSize":33554432,"action":"add"}

* ``path`` - fully-qualified, URI-encoded (``manifest.paths.encode_uri``);
* ``size`` - exact length in bytes (Spark plans splits with it);
* ``isDir`` - always false for data files (Spark's reader drops true entries);
* ``modificationTime`` - ms since the epoch (drives ``retention`` and streaming readers);
* ``blockReplication`` / ``blockSize`` - informational, Spark writes the filesystem's values;
* ``action`` - ``"add"``; Spark >= 3.1 does not interpret ``"delete"`` and neither do we.

All seven fields are required on read, exactly as Spark's json4s reader requires them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..log.codec import field
from .paths import decode_uri, encode_uri

DEFAULT_BLOCK_SIZE = 33_554_432  # what Hadoop's local filesystem reports; S3A reports 32 MiB too
ADD = "add"


@dataclass(frozen=True)
class ManifestEntry:
    """A committed data file as recorded in ``_spark_metadata``."""

    path: str  # URI-encoded, as on disk
    size: int
    is_dir: bool = False
    modification_time: int = 0
    block_replication: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE
    action: str = ADD

    @classmethod
    def for_file(cls, uri: str, *, size: int, modification_time: int) -> "ManifestEntry":
        """An ``add`` entry for the unencoded fully-qualified ``uri``."""
        return cls(path=encode_uri(uri), size=size, modification_time=modification_time)

    @property
    def uri(self) -> str:
        """The unencoded URI of the data file."""
        return decode_uri(self.path)


class ManifestEntryCodec:
    """``ManifestEntry`` <-> Spark's ``SinkFileStatus`` JSON."""

    def to_json(self, e: ManifestEntry) -> dict[str, Any]:
        return {
            "path": e.path,
            "size": e.size,
            "isDir": e.is_dir,
            "modificationTime": e.modification_time,
            "blockReplication": e.block_replication,
            "blockSize": e.block_size,
            "action": e.action,
        }

    def from_json(self, obj: dict[str, Any]) -> ManifestEntry:
        return ManifestEntry(
            path=field(obj, "path", str),
            size=field(obj, "size", int),
            is_dir=field(obj, "isDir", bool),
            modification_time=field(obj, "modificationTime", int),
            block_replication=field(obj, "blockReplication", int),
            block_size=field(obj, "blockSize", int),
            action=field(obj, "action", str),
        )
