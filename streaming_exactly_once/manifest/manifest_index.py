"""A columnar cache of one ``.compact`` manifest file, so readers need not parse its JSON.

``_spark_metadata/N.compact`` holds every live entry as JSON text: about 230 bytes per file,
so a table with a million files has a 230 MB compact file, and parsing it takes longer than a
second even with Arrow's multi-threaded JSON reader. The index is the same entries as Parquet::

    _seo/manifest-index/N.parquet
        columns:  path (string, URI-encoded as in the manifest), size (int64), modificationTime (int64)
        metadata: seo.index.version = "1", seo.source = "N.compact",
                  seo.source.size = <bytes of N.compact>, seo.source.mtime = <its mtime in ms>,
                  seo.source.line_ends = "lf" | "crlf"

It is derived data, never a source of truth: a compact file is written once and never changed,
so an index whose recorded size and mtime match the compact file's is that file's content; any
mismatch (or a missing or unreadable index) and readers parse the JSON as Spark does. The sink
writes it in the background after each compaction; ``seo index`` builds it for any table.
Needs pyarrow; without it nothing is written and readers parse JSON.

The metadata is the Parquet footer's key-value metadata; ``seo.source.line_ends`` is known only
once the compact file has been read, so it is added just before the footer is written and is
not in the Arrow schema that Parquet also stores there: read the footer's own key-values. It
says whether the compact file holds a ``\\r`` byte (``"crlf"``: Spark reads ``\\r\\n`` line
ends, ``log.version``, but nothing of ours writes them). Readers use the index either way; the
writer's compaction copies a compact file unread only when its index says ``"lf"``
(``index_matches``): a compaction writes plain ``\\n``, and a copy would not. An index without
the key (built before it existed) serves readers and vouches for nothing.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..storage.base import Storage
from .manifest_log import ManifestLog

log = logging.getLogger("streaming_exactly_once.manifest_index")

INDEX_DIR = "_seo/manifest-index"
VERSION = "1"

#: The first line of a manifest file as ``readline`` returns it: ``v1`` and its line end, CRLF
#: included (``log.version``), or ``v1`` alone when the file ends there.
HEADER_LINES = (b"v1\n", b"v1\r\n", b"v1", b"v1\r")


def index_path(compact_id: int) -> str:
    return f"{INDEX_DIR}/{compact_id}.parquet"


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
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if any(table.column(name).null_count for name in schema.names):
        return None
    return table


#: How much of the compact file the index builder parses at a time: its memory is a few of these
#: (Arrow's reader parses blocks in parallel), not the whole file - 230 MB at a million entries.
BLOCK_BYTES = 4 << 20


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


def stream_entries(
    source: Any, take: Callable[[Any], bool], *, block_bytes: int = BLOCK_BYTES, stats: StreamStats | None = None
) -> bool:
    """Parse the manifest body in binary file ``source``, from its position (just after the
    ``v1`` line) to its end, a block at a time, handing each block's entries - a
    ``pyarrow.RecordBatch`` of every ``entry_schema`` field - to ``take`` as they come.

    So a compact file is never held whole (230 MB at a million entries, #14): memory is a few
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
            parse_options=pj.ParseOptions(explicit_schema=entry_schema(), unexpected_field_behavior="ignore"),
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


def write_index(storage: Storage, compact_id: int, log_: ManifestLog | None = None) -> bool:
    """Build the index of ``<compact_id>.compact``; False if pyarrow is missing or the file is bad.

    The compact file is streamed: Arrow's JSON reader parses it a block at a time and each block
    goes to the Parquet writer as it comes, so the file is never held whole (#14: at a million
    entries the build peaked at 868 MB of RSS, now about 300 MB). The index gets one row group
    per block."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        return False
    log_ = log_ or ManifestLog(storage)
    name = f"{compact_id}.compact"
    path = f"{log_.directory}/{name}"
    info = storage.info(path)
    schema = pa.schema([("path", pa.string()), ("size", pa.int64()), ("modificationTime", pa.int64())]).with_metadata(
        {
            "seo.index.version": VERSION,
            "seo.source": name,
            "seo.source.size": str(info.size),
            "seo.source.mtime": str(info.mtime_ms),
        }
    )
    buffer = io.BytesIO()
    fs, root = storage.filesystem()
    try:
        with fs.open(f"{root.rstrip('/')}/{path}", "rb") as source, pq.ParquetWriter(
            buffer, schema, compression="zstd", use_dictionary=["path"]
        ) as writer:
            head = source.readline()
            if head not in HEADER_LINES:
                return False

            def take(batch: Any) -> bool:  # a pyarrow.RecordBatch of every entry field
                files = batch.filter(pc.invert(batch.column("isDir")))
                writer.write_batch(pa.record_batch([files.column(n) for n in schema.names], schema=schema))
                return True

            stats = StreamStats()
            if not stream_entries(source, take, stats=stats):
                return False  # the strict parser refuses it, or names what is wrong
            crlf = stats.carriage_returns or b"\r" in head
            writer.add_key_value_metadata({"seo.source.line_ends": "crlf" if crlf else "lf"})
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    try:
        storage.put_if_absent(index_path(compact_id), buffer.getvalue())
    except FileExistsError:
        pass
    return True


#: Rows the index is decoded in at a time: reading it whole (row groups in parallel) left about
#: 40 MB more of freed memory in Arrow's allocator at a million entries (#14), for no speed.
INDEX_BATCH_ROWS = 1 << 14
#: An index of at most this many rows is decoded at once, in parallel: faster, and small.
INDEX_WHOLE_ROWS = 1 << 18


def read_index(storage: Storage, compact_id: int, log_: ManifestLog, *, whole_rows: int = INDEX_WHOLE_ROWS) -> Any:  # a pyarrow Table or None
    """The index table if it exists and matches the compact file, else None.

    The match is checked on the footer before any row is decoded, so a stale index costs
    nothing; the rows of a large index are then decoded a batch at a time on this thread."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        data = storage.read_bytes(index_path(compact_id))
        info = storage.info(f"{log_.directory}/{compact_id}.compact")
        index = pq.ParquetFile(pa.BufferReader(data))
        schema = index.schema_arrow
        if not _indexes(_footer_metadata(index.metadata), compact_id, info):
            return None
        if index.metadata.num_rows <= whole_rows:
            return index.read()
        return pa.Table.from_batches(list(index.iter_batches(batch_size=INDEX_BATCH_ROWS, use_threads=False)), schema=schema)
    except FileNotFoundError:
        return None
    except Exception:  # an unreadable cache is no cache
        log.warning("ignoring unreadable manifest index %s", storage.uri(index_path(compact_id)))
        return None


def _footer_metadata(index: Any) -> dict[str, str]:  # a pyarrow.parquet.FileMetaData
    """The key-value metadata of an index's footer (the module docstring says why not the schema's)."""
    return {k.decode(): v.decode() for k, v in (index.metadata or {}).items()}


def _indexes(meta: dict[str, str], compact_id: int, info: Any) -> bool:  # a FileInfo
    """Whether an index with this footer metadata was built from this very compact file."""
    return (
        meta.get("seo.index.version") == VERSION
        and meta.get("seo.source") == f"{compact_id}.compact"
        and meta.get("seo.source.size") == str(info.size)
        and meta.get("seo.source.mtime") == str(info.mtime_ms)
    )


def index_matches(storage: Storage, compact_id: int, log_: ManifestLog) -> bool:
    """Whether compact file ``compact_id`` has an index built from it as it is now - which
    means every line of it was parsed, one record per line, when the index was built (the
    builder writes none otherwise) - and that file has plain ``\\n`` line ends, the bytes a
    compaction writes (module docstring). Reads the index's footer only."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return False
    try:
        info = storage.info(f"{log_.directory}/{compact_id}.compact")
        fs, root = storage.filesystem()
        with fs.open(f"{root.rstrip('/')}/{index_path(compact_id)}", "rb") as fh:
            meta = _footer_metadata(pq.read_metadata(fh))
        return _indexes(meta, compact_id, info) and meta.get("seo.source.line_ends") == "lf"
    except Exception:  # no index, or one that cannot be read: no vouching
        return False


def delete_stale_indexes(storage: Storage, log_: ManifestLog) -> list[str]:
    """Remove indexes whose compact file retention has deleted (a few files: one per compact)."""
    removed = []
    for entry in storage.list_dir(INDEX_DIR):
        stem = entry.name.split(".", 1)[0]
        if stem.isdigit() and not storage.exists(f"{log_.directory}/{stem}.compact"):
            storage.delete(entry.path)
            removed.append(entry.name)
    return removed
