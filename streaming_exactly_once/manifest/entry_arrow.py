"""Manifest entries as Arrow, parsed a block at a time: what the index builder and the readers
share (``manifest.manifest_index``, ``readers.manifest_scan``).

Arrow's JSON reader is faster than the strict parser (``log.version``) by an order of magnitude
and laxer in what it accepts; everything here either gives exactly what the strict parser would,
or says no - and the caller then reads the file with the strict parser, which accepts it or
names what is wrong.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The first line of a manifest file as ``readline`` returns it: ``v1`` and its line end, CRLF
#: included (``log.version``), or ``v1`` alone when the file ends there.
HEADER_LINES = (b"v1\n", b"v1\r\n", b"v1", b"v1\r")


def entry_schema() -> Any:  # a pyarrow.Schema
    """Spark's ``SinkFileStatus`` as an Arrow schema (every field required)."""
    import pyarrow as pa

    return pa.schema(
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


def _parse_options() -> Any:  # a pyarrow.json.ParseOptions
    """Arrow's JSON parsing of manifest lines: the fixed ``entry_schema``, and an *error* on any
    other field. Arrow would skip an unknown field unread, so a line the strict
    parser refuses there - a value nested 2,000 deep (Spark's Jackson refuses more than 1,000,
    ``log.version`` more than ``MAX_DEPTH``) - would be accepted. Neither Spark nor this library
    writes unknown fields, so a file with one is rare: the caller reads it with the strict
    parser, which accepts the file or names what is wrong, as for anything else Arrow declines."""
    import pyarrow.json as pj

    return pj.ParseOptions(explicit_schema=entry_schema(), unexpected_field_behavior="error")


def parse_entries_arrow(body: bytes) -> Any:  # a pyarrow Table or None
    """Arrow table (path, size, isDir, modificationTime) of a manifest body, or None if unusable."""
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        return None
    schema = entry_schema()
    if not body.strip():
        return pa.table({n: pa.array([], t) for n, t in zip(schema.names, schema.types, strict=True)})
    try:
        table = pj.read_json(
            io.BytesIO(body),
            read_options=pj.ReadOptions(block_size=max(1 << 20, min(len(body) // 2 + 1, 64 << 20))),
            parse_options=_parse_options(),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if any(table.column(name).null_count for name in schema.names):
        return None
    return table


#: How much of the compact file the index builder parses at a time: its memory is a few of these
#: (Arrow's reader parses blocks in parallel), not the whole file - 230 MB at a million entries.
#: With 4 MB blocks the build's peak RSS at a million entries was 317 MB, with 1 MB 175 MB.
BLOCK_BYTES = 1 << 20


class _LineCountingReader(io.RawIOBase):
    """The rest of a binary file, counting its lines as Arrow reads it: Arrow's JSON reader is
    laxer than Spark's (blank lines, two objects on one line), so one row per line is checked
    the way ``readers.manifest_scan`` checks a delta file it reads whole."""

    def __init__(self, source: Any) -> None:
        super().__init__()
        self._source = source
        self._newlines = 0
        self._carriage_return = False
        self._bytes = 0
        self._last = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._source.read(len(buffer))
        count = len(chunk)
        buffer[:count] = chunk
        if count:
            self._newlines += chunk.count(b"\n")
            # memchr, and only until the first: 20 ms at a million entries, a count took 90
            self._carriage_return = self._carriage_return or b"\r" in chunk
            self._bytes += count
            self._last = chunk[-1:]
        return count

    def records(self) -> int:
        """How many record lines the bytes read so far hold (a last newline ends a line)."""
        if not self._bytes:
            return 0
        return self._newlines + (0 if self._last == b"\n" else 1)

    def has_carriage_returns(self) -> bool:
        """Whether the bytes read so far hold a ``\\r`` (CRLF line ends, ``log.version``)."""
        return self._carriage_return


@dataclass
class StreamStats:
    """What ``stream_entries`` saw of a body it accepted: the index records it."""

    entries: int = 0  # one per line, directories included
    carriage_returns: bool = False  # a ``\\r`` among the bytes: CRLF line ends (``log.version``)


def stream_entries(source: Any, take: Callable[[Any], bool], *, block_bytes: int = BLOCK_BYTES, stats: StreamStats | None = None) -> bool:
    """Parse the manifest body in binary file ``source``, from its position (just after the
    ``v1`` line) to its end, a block at a time, handing each block's entries - a
    ``pyarrow.RecordBatch`` of every ``entry_schema`` field - to ``take`` as they come.

    So a compact file is never held whole (230 MB at a million entries): memory is a few
    blocks (``block_bytes`` each; a line longer than that is refused, so the strict parser
    reads it). True when the body was exactly one entry per line with every field (an empty body
    included) and ``take`` accepted every block; False at the first block Arrow cannot parse,
    with a field missing or null, or that ``take`` refuses, and when rows and lines differ
    (Arrow takes blank lines and two objects on one line, Spark's rule does not). On False the
    caller reads the file with the strict parser, which accepts it or names what is wrong.
    On True, ``stats`` (if given) says what the body held."""
    import pyarrow as pa
    import pyarrow.json as pj

    body = _LineCountingReader(source)
    try:
        reader = pj.open_json(
            body,
            read_options=pj.ReadOptions(block_size=block_bytes),
            parse_options=_parse_options(),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # Arrow refuses an empty stream, and whitespace alone: only a body of no bytes is no entries
        return body.records() == 0 and not source.read(1)  # (and the stats' zeros are right)
    rows = 0
    try:
        for batch in reader:
            if any(column.null_count for column in batch.columns):
                return False  # a field missing or null
            rows += batch.num_rows
            if not take(batch):
                return False
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    if stats is not None:
        stats.entries, stats.carriage_returns = rows, body.has_carriage_returns()
    return rows == body.records()
