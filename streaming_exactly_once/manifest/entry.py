"""One manifest line: Spark's ``SinkFileStatus``, field for field and in Spark's order.

Bytes of one entry (one line of ``_spark_metadata/N``)::

    {"path":"file:///data/events/day=2024-01-01/part-00000-<uuid>.c000.snappy.parquet","size":903,"isDir":false,"modificationTime":1795313165250,"blockReplication":1,"blockSize":33554432,"action":"add"}

* ``path`` - fully-qualified, URI-encoded (``manifest.paths.encode_uri``);
* ``size`` - exact length in bytes (Spark plans splits with it);
* ``isDir`` - always false for data files (Spark's reader drops true entries);
* ``modificationTime`` - ms since the epoch (drives ``retention`` and streaming readers);
* ``blockReplication`` / ``blockSize`` - informational, Spark writes the filesystem's values;
* ``action`` - ``"add"``; Spark >= 3.1 does not interpret ``"delete"`` and neither do we.

All seven fields are required on read, exactly as Spark's json4s reader requires them. On top
of Spark's checks, a line is refused (``LogCorruptError`` naming file, batch and line) when
``size`` is negative or ``path`` is not a URI Hadoop could parse - a ``%`` not followed by two
hex digits, escapes that decode to invalid UTF-8, a NUL character - because such an entry can
only come from damage, and would otherwise surface as an unrelated error in some reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field as dc_field
from urllib.parse import unquote

from ..log.codec import RecordError, non_negative, path_value
from ..log.record_fields import DataclassCodec, json_field
from .paths import decode_uri, encode_uri

DEFAULT_BLOCK_SIZE = 33_554_432  # what Hadoop's local filesystem reports; S3A reports 32 MiB too
ADD = "add"

#: Paths that need ``check_entry_path`` (RE2 and Python syntax alike, for Arrow's vectorised
#: pre-filter): a ``%`` without two hex digits, or an escaped byte >= 0x80 (which must be UTF-8).
#: Hadoop leaves non-ASCII letters unescaped, so the second kind is rare.
SUSPICIOUS_PATH = r"%([^0-9A-Fa-f]|[0-9A-Fa-f][^0-9A-Fa-f]|[0-9A-Fa-f]?$)|%[89A-Fa-f][0-9A-Fa-f]"
_BAD_ESCAPE = re.compile(r"%([^0-9A-Fa-f]|[0-9A-Fa-f][^0-9A-Fa-f]|[0-9A-Fa-f]?$)")


def check_entry_path(path: str, name: str = "path") -> str:
    """``path`` if it is a URI Hadoop parses and a file can have; ``RecordError`` otherwise."""
    path_value(path, "path")
    bad = _BAD_ESCAPE.search(path)
    if bad is not None:
        raise RecordError(f"field 'path' is not a valid URI: {bad.group(0)!r} is not a %XX escape in {path[:80]!r}")
    if "%" in path:
        try:
            unquote(path, encoding="utf-8", errors="strict")
        except UnicodeDecodeError:
            raise RecordError(f"field 'path' has %XX escapes that are not UTF-8: {path[:80]!r}") from None
    return path


@dataclass(frozen=True)
class ManifestEntry:
    """A committed data file as recorded in ``_spark_metadata``."""

    path: str = dc_field(metadata=json_field("path", str, check=check_entry_path))  # URI-encoded, as on disk
    size: int = dc_field(metadata=json_field("size", int, check=non_negative))
    is_dir: bool = dc_field(default=False, metadata=json_field("isDir", bool))
    modification_time: int = dc_field(default=0, metadata=json_field("modificationTime", int))
    block_replication: int = dc_field(default=1, metadata=json_field("blockReplication", int))
    block_size: int = dc_field(default=DEFAULT_BLOCK_SIZE, metadata=json_field("blockSize", int))
    action: str = dc_field(default=ADD, metadata=json_field("action", str))

    @classmethod
    def for_file(cls, uri: str, *, size: int, modification_time: int) -> ManifestEntry:
        """An ``add`` entry for the unencoded fully-qualified ``uri``."""
        return cls(path=encode_uri(uri), size=size, modification_time=modification_time)

    @property
    def uri(self) -> str:
        """The unencoded URI of the data file."""
        return decode_uri(self.path)


class ManifestEntryCodec(DataclassCodec[ManifestEntry]):
    """``ManifestEntry`` <-> Spark's ``SinkFileStatus`` JSON (all seven fields required)."""

    def __init__(self) -> None:
        super().__init__(ManifestEntry)
