"""A columnar cache of one ``.compact`` manifest file, so readers need not parse its JSON.

``_spark_metadata/N.compact`` holds every live entry as JSON text: about 230 bytes per file,
so a table with a million files has a 230 MB compact file, and parsing it takes longer than a
second even with Arrow's multi-threaded JSON reader. The index is the same entries as Parquet::

    _seo/manifest-index/N.parquet
        columns:  path (string), size (int64), modificationTime (int64) - exactly these, in this
                  order, no nulls; one row per non-directory entry of N.compact, in its order
                  (the path URI-encoded as in the manifest); row groups of ``ROW_GROUP_ROWS``
                  rows (the last one fewer; older builds: one per parsed block); zstd, no dictionary (every
                  path is distinct: one made the index larger and 2.5x slower to read)
        metadata: seo.index.version = "2", seo.source = "N.compact",
                  seo.source.size = <bytes of N.compact>, seo.source.mtime = <its mtime in ms>,
                  seo.source.change = <what the store says changes with its content: on a
                  local disk "<inode>:<ctime in ns>", on an object store its ETag; absent
                  where the store says nothing>,
                  seo.source.entries = <entries (lines) of N.compact>,
                  seo.source.files = <its non-directory entries: the index's rows>,
                  seo.source.line_ends = "lf" | "crlf"

The metadata is the Parquet footer's key-value metadata; the last three keys are added just
before the footer is written, so they are not in the stored Arrow schema (``_read_footer``).

It is derived data, never a source of truth, and a cache must never change an answer nor raise:
an index whose recorded size, mtime and change (where the store has one: a file replaced by one
of the same size with its mtime put back, ``cp -p``, has another inode or ctime) match its
compact file, whose version is ``VERSION`` and
whose shape is sound (checked on the footer before a row is decoded) is used; any other is
ignored and readers parse the JSON as Spark does. The writer extends the previous compact
file's index with the new records instead of parsing the whole file again, and copies a compact
file unread only when its index is usable and says ``"lf"`` (``index_matches``).
``docs/design/compaction.md`` has the whole argument.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..log.version import header
from ..storage.base import Storage
from .entry_arrow import HEADER_LINES, StreamStats, stream_entries
from .manifest_log import ManifestLog

log = logging.getLogger("streaming_exactly_once.manifest_index")

INDEX_DIR = "_seo/manifest-index"
VERSION = "2"


def index_path(compact_id: int) -> str:
    return f"{INDEX_DIR}/{compact_id}.parquet"


def index_schema() -> Any:  # a pyarrow.Schema
    """The index's columns, exactly (module docstring)."""
    import pyarrow as pa

    return pa.schema([("path", pa.string()), ("size", pa.int64()), ("modificationTime", pa.int64())])


#: Rows per row group of an index (module docstring): the builder holds one row group, and the
#: extension decodes the previous index a row group at a time - at a million entries a writer
#: with row groups of 131,072 rows peaked at 239 MB of RSS, with 32,768 at 180 MB.
ROW_GROUP_ROWS = 1 << 15

#: Set once ``warm_up`` has run in this process.
WARMED_UP = threading.Event()


def warm_up() -> None:
    """Import what building an index needs, while nothing waits for it: pyarrow's parquet
    module (~0.12 s) and pandas, which pyarrow imports at the first array it builds from Python
    objects (~0.33 s). Left to the first compaction after a start, both ran beside the next
    batches and slowed them. Nothing to import if pyarrow is missing."""
    try:
        import pyarrow as pa
        import pyarrow.parquet  # noqa: F401

        pa.array([], pa.string())
    except ImportError:
        pass
    finally:
        WARMED_UP.set()


def write_index(storage: Storage, compact_id: int, log_: ManifestLog | None = None) -> bool:
    """Build the index of ``<compact_id>.compact``; False if pyarrow is missing or the file is bad.

    The compact file is streamed: Arrow's JSON reader parses it a block at a time (``BLOCK_BYTES``)
    and the blocks go to the Parquet writer ``ROW_GROUP_ROWS`` rows at a time, so the file is
    never held whole (at a million entries the build peaked at 868 MB of RSS, then 317 MB with
    4 MB blocks, now about 180 MB)."""
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
    schema = index_schema().with_metadata(
        {
            "seo.index.version": VERSION,
            "seo.source": name,
            "seo.source.size": str(info.size),
            "seo.source.mtime": str(info.mtime_ms),
            **({"seo.source.change": info.change} if info.change else {}),
        }
    )
    extended = _extended_index(storage, compact_id, log_, schema, info) if log_.wrote_compact(compact_id) else None
    if extended is not None:
        _put_replacing_unusable(storage, compact_id, extended, info)
        return True
    buffer = io.BytesIO()
    fs, root = storage.filesystem()
    try:
        with (
            fs.open(f"{root.rstrip('/')}/{path}", "rb") as source,
            pq.ParquetWriter(buffer, schema, compression="zstd", use_dictionary=False) as writer,
        ):
            head = source.readline()
            if head not in HEADER_LINES:
                return False

            rows = 0
            held: list[Any] = []  # pyarrow RecordBatches: the rows of the next row group

            def flush() -> None:
                if held:
                    group = pa.Table.from_batches(held, schema=schema)
                    writer.write_table(group, row_group_size=max(1, group.num_rows))
                    held.clear()

            def take(batch: Any) -> bool:  # a pyarrow.RecordBatch of every entry field
                nonlocal rows
                files = batch.filter(pc.invert(batch.column("isDir")))
                held.append(pa.record_batch([files.column(n) for n in schema.names], schema=schema))
                rows += files.num_rows
                if sum(b.num_rows for b in held) >= ROW_GROUP_ROWS:
                    flush()
                return True

            stats = StreamStats()
            if not stream_entries(source, take, stats=stats):
                return False  # the strict parser refuses it, or names what is wrong
            flush()
            crlf = stats.carriage_returns or b"\r" in head
            writer.add_key_value_metadata(
                {"seo.source.entries": str(stats.entries), "seo.source.files": str(rows), "seo.source.line_ends": "crlf" if crlf else "lf"}
            )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    _put_replacing_unusable(storage, compact_id, buffer.getvalue(), info)
    return True


def _extended_index(storage: Storage, compact_id: int, log_: ManifestLog, schema: Any, info: Any) -> bytes | None:
    """The index of compact file ``compact_id``, which ``log_`` wrote, as the previous compact
    file's index + the records after it (module docstring, "Extended"); None where that cannot
    be shown to be the file's content: build it from the JSON then. ``schema`` is the index's,
    with the new file's metadata; ``info`` the new file's ``FileInfo``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    previous_id = compact_id - log_.interval
    if previous_id < 0:
        return None
    previous_path = f"{log_.directory}/{previous_id}.compact"
    context = f"needed to index compact batch {compact_id}"
    try:
        previous_info = storage.info(previous_path)
        previous = pq.ParquetFile(pa.BufferReader(storage.read_bytes(index_path(previous_id))))
        meta = _read_footer(previous.metadata)
        if _stale(meta, previous_id, previous_info) is not None or _damage(previous.metadata) is not None:
            return None
        if meta["seo.source.line_ends"] != "lf":
            return None  # its body was copied with ``\n`` line ends: other bytes than it has
        # The new file: ``v1`` + the previous file's body (its last newline left out, as
        # ``raw_body`` and ``compact_range`` take it) + the deltas' bodies + its own records.
        prefix = previous_info.size - (1 if storage.read_tail(previous_path, 1) == b"\n" else 0)
        records = []
        for batch_id in range(previous_id + 1, compact_id):
            body = log_.raw_body(batch_id, context=context)  # checked, and decoded: a delta
            prefix += len(body)
            records.extend(log_.decode(header(log_.version) + bytes(body), batch_id=batch_id))
        if prefix > info.size:
            return None
        own = storage.read_tail(f"{log_.directory}/{compact_id}.compact", info.size - prefix) if info.size > prefix else b""
        if own and not own.startswith(b"\n{"):
            return None
        records.extend(log_.decode(header(log_.version) + own, batch_id=compact_id))
        if storage.info(f"{log_.directory}/{compact_id}.compact") != info or not log_.wrote_compact(compact_id):
            return None  # changed while read: the JSON path says what is there now
    except FileNotFoundError:
        return None  # retention removed the previous file or index: parse the JSON
    except Exception as exc:  # an unreadable previous index, a damaged delta: the JSON path decides
        log.debug("not extending the index of %d.compact (%s: %s)", previous_id, type(exc).__name__, str(exc)[:200])
        return None
    files = [r for r in records if not r.is_dir]
    new_rows = pa.table(
        {
            "path": pa.array([r.path for r in files], pa.string()),
            "size": pa.array([r.size for r in files], pa.int64()),
            "modificationTime": pa.array([r.modification_time for r in files], pa.int64()),
        },
        schema=index_schema(),
    )
    total_files = previous.metadata.num_rows + new_rows.num_rows
    total_entries = int(meta["seo.source.entries"]) + len(records)
    buffer = io.BytesIO()
    copied = 0
    with pq.ParquetWriter(buffer, schema, compression="zstd", use_dictionary=False) as writer:
        held: list[Any] = []  # pyarrow Tables: the rows of the next row group
        held_rows = 0
        for group in range(previous.num_row_groups):
            rows = previous.read_row_group(group, use_threads=False)
            if _table_damage(rows, rows.num_rows) is not None:
                return None
            copied += rows.num_rows
            held.append(rows)
            held_rows += rows.num_rows
            if held_rows >= ROW_GROUP_ROWS:
                writer.write_table(pa.concat_tables(held), row_group_size=held_rows)
                held, held_rows = [], 0
        held.append(new_rows)
        writer.write_table(pa.concat_tables(held), row_group_size=max(1, held_rows + new_rows.num_rows))
        writer.add_key_value_metadata({"seo.source.entries": str(total_entries), "seo.source.files": str(total_files), "seo.source.line_ends": "lf"})
    if copied != previous.metadata.num_rows:
        return None
    return buffer.getvalue()


def _put_replacing_unusable(storage: Storage, compact_id: int, data: bytes, info: Any) -> None:  # a FileInfo
    """Write a freshly built index; one already there stays if it is usable (built from the same
    file: another builder's), and is replaced if stale or damaged - else an old or damaged index
    would keep readers on the JSON path for as long as its compact file lives."""
    import pyarrow.parquet as pq

    path = index_path(compact_id)
    try:
        storage.put_if_absent(path, data)
        return
    except FileExistsError:
        pass
    try:
        fs, root = storage.filesystem()
        with fs.open(f"{root.rstrip('/')}/{path}", "rb") as fh:
            footer = pq.read_metadata(fh)
        if _stale(_read_footer(footer), compact_id, info) is None and _damage(footer) is None:
            return
    except Exception:  # removed meanwhile, or not even a footer: replace it
        pass
    log.info("replacing the stale or damaged manifest index %s", storage.uri(path))
    storage.delete(path)
    try:
        storage.put_if_absent(path, data)
    except FileExistsError:
        pass  # another builder's, of the same file


#: Rows the index is decoded in at a time: reading it whole (row groups in parallel) left about
#: 40 MB more of freed memory in Arrow's allocator at a million entries, for no speed.
INDEX_BATCH_ROWS = 1 << 14
#: An index of at most this many rows is decoded at once, in parallel: faster, and small.
INDEX_WHOLE_ROWS = 1 << 18


def read_index(storage: Storage, compact_id: int, log_: ManifestLog, *, whole_rows: int | None = None) -> Any:  # a pyarrow Table or None
    """The index table if it exists, matches the compact file and is sound (module docstring),
    else None: never an exception, never a table that could change an answer (``read_index_batches``)."""
    batches: list[Any] = []

    def take(batch: Any) -> bool:
        batches.append(batch)
        return True

    if not read_index_batches(storage, compact_id, log_, take, whole_rows=whole_rows):
        return None
    import pyarrow as pa

    return pa.Table.from_batches(batches, schema=index_schema())


def read_index_batches(storage: Storage, compact_id: int, log_: ManifestLog, take: Callable[[Any], bool], *, whole_rows: int | None = None) -> bool:
    """Hand the index's rows to ``take`` a ``pyarrow.RecordBatch`` at a time, in order; True if
    the index exists, matches the compact file, is sound (module docstring) and ``take``
    accepted every batch. On False the caller discards what ``take`` got: never an exception.

    The match and the soundness of the footer are checked before any row is decoded, so a stale
    or damaged index costs nothing; the file is read as it is decoded, not held whole, and the
    rows of a large index are decoded a batch at a time on this thread - a reader maps each
    batch and lets it go, so the index's absolute paths (90 MB at a million entries) are never
    all held. Each batch is checked again (the footer could be right and the pages not)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return False
    uri = storage.uri(index_path(compact_id))
    try:
        fs, root = storage.filesystem()
        info = storage.info(f"{log_.directory}/{compact_id}.compact")
        with fs.open(f"{root.rstrip('/')}/{index_path(compact_id)}", "rb") as fh:
            index = pq.ParquetFile(fh)
            footer = index.metadata
            stale = _stale(_read_footer(footer), compact_id, info)
            if stale is not None:
                log.debug("not using the manifest index %s: %s", uri, stale)
                return False
            problem = _damage(footer)
            if problem is None:
                if footer.num_rows <= (INDEX_WHOLE_ROWS if whole_rows is None else whole_rows):
                    batches: Any = index.read().to_batches()
                else:
                    batches = index.iter_batches(batch_size=INDEX_BATCH_ROWS, use_threads=False)
                rows = 0
                for batch in batches:
                    problem = _table_damage(batch, batch.num_rows)
                    if problem is not None:
                        break
                    rows += batch.num_rows
                    if not take(batch):
                        return False
                    del batch
                if problem is None and rows != footer.num_rows:
                    problem = f"it decoded to {rows} rows, not {footer.num_rows}"
                if problem is None:
                    return True
    except FileNotFoundError:
        return False
    except Exception as exc:  # an unreadable cache is no cache
        problem = f"it cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
    log.warning(
        "ignoring the damaged manifest index %s: %s. Readers parse the compact file's JSON instead; `seo index <table>` rebuilds the index.",
        uri,
        problem,
    )
    return False


def _read_footer(footer: Any) -> dict[str, str]:  # a pyarrow.parquet.FileMetaData
    """The key-value metadata of an index's footer (the module docstring says why not the schema's)."""
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in (footer.metadata or {}).items()}


def _stale(meta: dict[str, str], compact_id: int, info: Any) -> str | None:  # a FileInfo
    """Why an index with this footer metadata is not (or no longer) the index of compact file
    ``compact_id`` as it is now; None if it is."""
    if meta.get("seo.index.version") != VERSION:
        return f"index version {meta.get('seo.index.version')!r}, this library reads {VERSION!r}"
    if meta.get("seo.source") != f"{compact_id}.compact":
        return f"built from {meta.get('seo.source')!r}"
    if meta.get("seo.source.size") != str(info.size) or meta.get("seo.source.mtime") != str(info.mtime_ms):
        return "the compact file changed since it was built (size or modification time)"
    if meta.get("seo.source.change", "") != info.change:  # an index built before the key: built again
        return "the compact file was replaced since it was built (another inode, status-change time or ETag)"
    return None


def _damage(footer: Any) -> str | None:  # a pyarrow.parquet.FileMetaData
    """What is wrong with an index whose metadata matches its compact file, from its footer
    alone; None if nothing is (module docstring: the exact columns, no nulls, the row count)."""
    meta = _read_footer(footer)
    schema = footer.schema.to_arrow_schema()
    if not schema.equals(index_schema(), check_metadata=False):
        return f"its columns are {schema.to_string(show_schema_metadata=False)!r}"
    files = meta.get("seo.source.files", "")
    if not files.isdigit() or not meta.get("seo.source.entries", "").isdigit() or meta.get("seo.source.line_ends") not in ("lf", "crlf"):
        return "its metadata lacks the entry count or line ends"
    if footer.num_rows != int(files):
        return f"it has {footer.num_rows} rows, the compact file {files} files"
    for group in range(footer.num_row_groups):
        row_group = footer.row_group(group)
        if row_group.num_rows == 0:
            continue  # an empty row group has no statistics
        for column in range(row_group.num_columns):
            stats = row_group.column(column).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                return f"column {schema.names[column]} of row group {group} holds nulls, or does not say"
    return None


def _table_damage(table: Any, rows: int) -> str | None:  # a pyarrow.Table or RecordBatch
    """``_damage`` again on the decoded table (or one batch of it): the columns, the rows, no nulls."""
    if not table.schema.equals(index_schema(), check_metadata=False):
        return "its decoded columns differ from its footer's"
    if table.num_rows != rows:
        return f"it decoded to {table.num_rows} rows, not {rows}"
    if any(column.null_count for column in table.columns):
        return "it decoded to nulls"
    return None


def index_matches(storage: Storage, compact_id: int, log_: ManifestLog) -> bool:
    """Whether compact file ``compact_id`` has a usable index (``read_index``'s rule, on the
    footer) built from it as it is now - which means every line of it was parsed, one record per
    line, when the index was built (the builder writes none otherwise) - and that file has plain
    ``\\n`` line ends, the bytes a compaction writes (module docstring). Reads the index's footer
    only: its pages are the readers' business, the compact file is what gets copied."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return False
    try:
        info = storage.info(f"{log_.directory}/{compact_id}.compact")
        fs, root = storage.filesystem()
        with fs.open(f"{root.rstrip('/')}/{index_path(compact_id)}", "rb") as fh:
            footer = pq.read_metadata(fh)
        meta = _read_footer(footer)
        return _stale(meta, compact_id, info) is None and _damage(footer) is None and meta["seo.source.line_ends"] == "lf"
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
