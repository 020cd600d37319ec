"""Read the manifest entries of a snapshot as columns, fast enough for a million entries.

Which files make up the snapshot - the compact file and the deltas after it, as of a batch - is
decided by ``ManifestLog`` alone. Each file is then read the fastest safe way:

1. a compact file with a matching Parquet index (``manifest.manifest_index``): read the index;
2. otherwise, with pyarrow installed, Arrow's multi-threaded JSON reader with the fixed
   ``SinkFileStatus`` schema - a compact file streamed a block at a time
   (``manifest.entry_arrow.stream_entries``), never held whole, a delta file (a batch's few entries)
   read whole;
3. otherwise - or when Arrow rejects a file - the strict pure-Python parser of the log layer,
   which also produces the precise error (file, batch, line) for a damaged file.

Arrow's reader is more lenient than Spark's and ours (two objects on one line, blank lines), and
it accepts values the strict parser refuses (negative sizes, paths that are not URIs). So a file
read the fast way is checked cheaply - one row per line, no negative size, no path matching
``entry.SUSPICIOUS_PATH`` that fails ``check_entry_path``, paths that are valid UTF-8 - and anything odd is read again the
strict way, which raises the named error. Both ways accept exactly the same files.

With pyarrow the result is Arrow arrays - chunked as read, never joined into one copy (
at a million entries every copy of the paths is about 100 MB) - or, given a ``ColumnSink``, the
pieces handed to it as they are read, so a reader maps each one and lets it go; without
pyarrow, Python lists.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from ..log.codec import RecordError
from ..log.compaction import is_compaction_batch
from ..manifest.entry import SUSPICIOUS_PATH, check_entry_path
from ..manifest.entry_arrow import HEADER_LINES, parse_entries_arrow, stream_entries
from ..manifest.manifest_index import read_index_batches
from ..manifest.manifest_log import ManifestLog


@dataclass
class ManifestColumns:
    paths: Any  # pyarrow.StringArray or list[str], URI-encoded
    sizes: Any
    mtimes: Any
    arrow: bool


def _pyarrow() -> tuple[Any, Any]:  # the pyarrow and pyarrow.compute modules, or Nones
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return None, None
    return pa, pc


def _python_columns(log: ManifestLog, data: bytes, batch_id: int) -> tuple[list[str], list[int], list[int]]:
    entries = [e for e in log.decode(data, batch_id=batch_id) if not e.is_dir]
    return [e.path for e in entries], [e.size for e in entries], [e.modification_time for e in entries]


def _records_in(data: bytes) -> int:
    """How many record lines a log file holds (the strict parser's count)."""
    body = data[:-1] if data.endswith(b"\n") else data
    return body.count(b"\n")


#: One regex pass finds both kinds of odd paths (RE2 syntax): a NUL, or ``entry.SUSPICIOUS_PATH``.
_ODD_PATH = "\\x00|" + SUSPICIOUS_PATH


def _looks_sound(pc: Any, paths: Any, sizes: Any) -> bool:  # pyarrow.compute and Arrow arrays
    """The cheap checks of the module docstring, on one file's Arrow columns."""
    if len(sizes) and pc.min(sizes).as_py() < 0:
        return False
    import pyarrow as pa

    try:
        paths.validate(full=True)  # UTF-8: Arrow's JSON reader lets invalid bytes into strings
    except pa.ArrowInvalid:
        return False
    odd = paths.filter(pc.match_substring_regex(paths, _ODD_PATH))
    try:
        for path in odd.to_pylist():
            check_entry_path(path)
    except RecordError:
        return False
    return True


def _read(log: ManifestLog, batch_id: int, context: str) -> bytes:
    try:
        return log.storage.read_bytes(log.path(batch_id))
    except FileNotFoundError:
        log.read(batch_id, context=context)  # raises MissingBatchError with the context
        raise


#: Block size for streaming a compact file: its parsed entries are kept, and with 4 MB blocks
#: Arrow's allocator held about 2.5 times their size at a million entries, with 1 MB blocks
#: about 1.5 times, at much the same speed.
STREAM_BLOCK_BYTES = 1 << 20
#: A compact file whose body is shorter is read whole and parsed at once, as a delta file is:
#: at 100k entries (23 MB) streaming was 10 to 30 % slower, and memory matters at a million.
WHOLE_BELOW_BYTES = 64 << 20
#: Parsed blocks whose kept columns are copied into one array each: a block's path, size and
#: mtime sit among the columns dropped (action, blockSize, ...) in pages of Arrow's worker
#: threads, which cannot be handed back while anything in them is alive; the copy frees the
#: blocks whole (peak RSS of read.files at a million entries about 380 MB instead of 400) and
#: leaves 16 times fewer chunks for the mapping.
SETTLE_BLOCKS = 16


def _arrow_columns(pc: Any, data: bytes) -> tuple[Any, Any, Any] | None:  # pyarrow.compute, a file's bytes
    """(paths, sizes, mtimes) of a manifest file held whole, parsed by Arrow; None if Arrow
    cannot parse it or it fails a check of the module docstring."""
    newline = data.find(b"\n")
    if data[: newline + 1 if newline >= 0 else len(data)] not in HEADER_LINES:  # CRLF too (log.version)
        return None
    table = parse_entries_arrow(b"" if newline < 0 else data[newline + 1 :])
    if table is None or table.num_rows != _records_in(data) or not _looks_sound(pc, table.column("path"), table.column("size")):
        return None
    table = table.filter(pc.invert(table.column("isDir")))
    return table.column("path"), table.column("size"), table.column("modificationTime")


def _stream_into(log: ManifestLog, batch_id: int, sink: ColumnSink, *, whole_below: int = WHOLE_BELOW_BYTES) -> bool:
    """Feed ``sink`` the (paths, sizes, mtimes) of a compact file streamed through Arrow - or,
    when its body is shorter than ``whole_below``, read whole from the same stream and parsed at
    once, which is faster and costs little memory at that size. False when the file cannot be
    opened as a stream, does not start with a ``v1`` line (CRLF or not), or fails a check of the
    module docstring - the caller then rolls the sink back, reads the file whole, as before, and
    raises the same errors."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pending: tuple[list[Any], list[Any], list[Any]] = ([], [], [])

    def settle() -> None:  # the pending blocks' kept columns copied into one array each, handed on
        if pending[0]:
            sink.add(*(pa.concat_arrays(parts) for parts in pending))
            for parts in pending:
                parts.clear()

    def take(batch: Any) -> bool:  # every field of a block's entries, directories included
        if not _looks_sound(pc, batch.column("path"), batch.column("size")):
            return False
        files = batch.filter(pc.invert(batch.column("isDir"))) if pc.any(batch.column("isDir")).as_py() else batch
        for parts, name in zip(pending, ("path", "size", "modificationTime"), strict=True):
            parts.append(files.column(name))
        if len(pending[0]) >= SETTLE_BLOCKS:
            settle()
        return True

    fs, root = log.storage.filesystem()
    try:
        with fs.open(f"{root.rstrip('/')}/{log.path(batch_id)}", "rb") as source:
            head = source.readline()
            if head not in HEADER_LINES:  # b"v1": the file ends there; CRLF line ends too (log.version)
                return False
            start = source.tell()
            body = source.read(whole_below)
            if len(body) < whole_below:
                parsed = _arrow_columns(pc, head + body)
                if parsed is not None:
                    sink.add(*parsed)
                return parsed is not None
            del body
            source.seek(start)
            if not stream_entries(source, take, block_bytes=STREAM_BLOCK_BYTES):
                return False
    except OSError:  # absent or unreadable: the whole-file read raises the named error
        return False
    settle()
    return True


class ColumnSink(Protocol):
    """Where a scan hands the columns of the entries it reads, a piece at a time, in table
    order: a reader maps each piece and lets the absolute paths go (``table_roots.ChunkMapper``)."""

    def add(self, paths: Any, sizes: Any, mtimes: Any) -> None: ...  # pyarrow arrays

    def mark(self) -> int: ...

    def rollback(self, mark: int) -> None:
        """Forget what was added since ``mark``: a file's fast read failed half way and it is read again."""


class _Collected:
    """A ``ColumnSink`` keeping every piece (``file_columns``, ``scan_manifest``)."""

    def __init__(self) -> None:
        self.pieces: list[tuple[Any, Any, Any]] = []

    def add(self, paths: Any, sizes: Any, mtimes: Any) -> None:
        self.pieces.append((paths, sizes, mtimes))

    def mark(self) -> int:
        return len(self.pieces)

    def rollback(self, mark: int) -> None:
        del self.pieces[mark:]

    def columns(self) -> tuple[Any, Any, Any]:  # each a chunked array, no copy
        import pyarrow as pa

        def column(i: int, kind: Any) -> Any:
            arrays: list[Any] = []
            for piece in self.pieces:
                arrays.extend(piece[i].chunks if isinstance(piece[i], pa.ChunkedArray) else [piece[i]])
            return pa.chunked_array(arrays, kind)

        return column(0, pa.string()), column(1, pa.int64()), column(2, pa.int64())


def _streamed(log: ManifestLog, batch_id: int, *, whole_below: int = WHOLE_BELOW_BYTES) -> tuple[Any, Any, Any] | None:
    """``_stream_into`` collected: each column a chunked array, or None."""
    collected = _Collected()
    return collected.columns() if _stream_into(log, batch_id, collected, whole_below=whole_below) else None


def feed_file(log: ManifestLog, batch_id: int, sink: ColumnSink, *, context: str) -> None:
    """Hand ``sink`` the non-directory entries of one manifest file (needs pyarrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if is_compaction_batch(batch_id, log.interval):
        mark = sink.mark()

        def take(batch: Any) -> bool:
            paths, sizes, mtimes = batch.column("path"), batch.column("size"), batch.column("modificationTime")
            if not _looks_sound(pc, paths, sizes):
                return False
            sink.add(paths, sizes, mtimes)
            return True

        if read_index_batches(log.storage, batch_id, log, take):
            return
        sink.rollback(mark)
        if _stream_into(log, batch_id, sink):
            return
        sink.rollback(mark)
    data = _read(log, batch_id, context)
    parsed = _arrow_columns(pc, data)
    if parsed is None:
        paths, sizes, mtimes = _python_columns(log, data, batch_id)
        parsed = pa.array(paths, pa.string()), pa.array(sizes, pa.int64()), pa.array(mtimes, pa.int64())
    sink.add(*parsed)


def file_columns(log: ManifestLog, batch_id: int, *, context: str) -> tuple[Any, Any, Any]:
    """(paths, sizes, mtimes) of the non-directory entries of one manifest file."""
    pa, _ = _pyarrow()
    if pa is None:
        return _python_columns(log, _read(log, batch_id, context), batch_id)
    collected = _Collected()
    feed_file(log, batch_id, collected, context=context)
    return collected.columns()


def release_arrow_memory() -> None:
    """Hand the memory Arrow's allocators keep after a scan back to the system.

    The manifest's raw columns are dropped once they are mapped, but the allocators keep the
    pages for reuse, and what comes next - a list of a million Python strings for
    ``read.files``, a dataset for the engines - is allocated elsewhere: at a million entries
    that was 80 MB of peak RSS. Arrow's ``release_unused`` of the system allocator does not
    trim malloc's heap (66 MB kept at a million entries): ``malloc_trim`` does, where the C
    library has it (glibc). Nothing to do without pyarrow."""
    pa, _ = _pyarrow()
    if pa is None:
        return
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Any:  # the C library's malloc_trim, or None
    try:
        import ctypes

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


_POOL_LOCK = threading.Lock()
_POOL_DEPTH = 0
_POOL_BEFORE: Any = None


@contextmanager
def scan_memory_pool() -> Iterator[None]:
    """Arrow allocates from the system allocator (malloc) while a reader scans and maps the
    manifest, then the process default again.

    A scan allocates and frees a million entries' columns in pieces, and keeps the mapped ones:
    Arrow's default allocator (mimalloc) kept the pages the freed pieces shared with the kept
    ones, even after ``release_unused`` - 57 MB above the 66 MB of columns kept at a million
    entries - where malloc kept 11 MB. The kept buffers remember their allocator, so nothing
    changes for whoever uses them later; scans on several threads at once share one switch
    (the last to finish puts the default back). Nothing to do without pyarrow."""
    global _POOL_DEPTH, _POOL_BEFORE
    pa, _ = _pyarrow()
    if pa is None:
        yield
        return
    with _POOL_LOCK:
        if _POOL_DEPTH == 0:
            _POOL_BEFORE = pa.default_memory_pool()
            pa.set_memory_pool(pa.system_memory_pool())
        _POOL_DEPTH += 1
    try:
        yield
    finally:
        with _POOL_LOCK:
            _POOL_DEPTH -= 1
            if _POOL_DEPTH == 0:
                pa.set_memory_pool(_POOL_BEFORE)
                _POOL_BEFORE = None


def scan_manifest(log: ManifestLog, as_of: int | None = None, sink: ColumnSink | None = None) -> ManifestColumns:
    """Every non-directory entry visible as of batch ``as_of`` (default: the latest); with pyarrow
    and a ``sink``, handed to it a piece at a time (the columns returned are then empty)."""
    pa, _ = _pyarrow()
    ids = log.valid_batches(as_of)
    context = f"needed to read the table as of batch {ids[-1]} (compact interval {log.interval})" if ids else ""
    if pa is None:
        chunks = [_python_columns(log, _read(log, batch_id, context), batch_id) for batch_id in ids]
        return ManifestColumns([p for c in chunks for p in c[0]], [s for c in chunks for s in c[1]], [m for c in chunks for m in c[2]], False)
    collected = _Collected()
    for batch_id in ids:
        feed_file(log, batch_id, sink or collected, context=context)
    return ManifestColumns(*collected.columns(), True)
