"""Small data files of earlier batches rewritten into one, published by a compaction batch.

``docs/design/data-compaction.md`` has the reader-by-reader analysis. In short: Spark's batch
reader takes a ``.compact`` manifest file as the whole listing, so a replacement can only take
effect there; the batch that writes ``M.compact`` also publishes the rewrites planned here, in
its own claim (``TableCommitter.commit``): the new file is staged in the background
(``commit.rewrite_preparation``) and moved like the batch's files, ``M.compact`` lists it
instead of the files it replaces, and a Delta commit removes them and adds it with
``dataChange`` false.

What is rewritten (``plan``): Parquet files of one directory (a partition) that received no
file for ``quiet_period_ms``, each smaller than half the target size and written at least
``min_age_ms`` ago (by the entry's ``modificationTime``), at least ``min_files`` of them, oldest first, up to the target size per
new file and ``max_bytes`` per compaction batch. The caller leaves out files the manifest's
``retention`` is about to drop.

The new file (``write``) holds the rows of the replaced files, in their order. Only files with
the first one's Arrow schema (key-value metadata included: Spark's rebase markers) and
timestamp layout are merged; INT96 timestamps are read as microseconds and written as INT96.
The file is read back and compared with the rows it replaces before it is staged; a rewrite
that does not compare equal is left out, never the batch. Its manifest entry's
``modificationTime`` is the newest of the replaced files', so a downstream file-source query
whose ``latestTimestamp - maxFileAge`` is past that time skips it (the design page states when
that holds).

On disk: the WAL's ``manifest`` step lists the replaced files' manifest paths (``replaced``),
its ``move`` step moves the new files, and a Delta table's ``delta`` step carries the
``Rewrite`` records below (``rewrites``).
"""

from __future__ import annotations

import io
import logging
import posixpath
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field as dc_field
from typing import Any

from ..log.codec import RecordError, non_negative
from ..log.record_fields import json_field
from ..manifest.entry import ManifestEntry
from ..manifest.manifest_log import ManifestLog
from ..manifest.paths import relative_to_root
from ..storage.base import Storage
from .compaction_consumers import Consumer
from .format_step_fields import inside, inside_field

log = logging.getLogger("streaming_exactly_once.compaction")

#: The new files' names: Spark's ``part-`` prefix (so every reader's listing rules take them)
#: and a marker that says which compaction batch they were planned for.
NAME = "part-compacted-{batch}-{n:05d}-{uid}.snappy.parquet"
#: Under a staging directory (``commit.rewrite_preparation``): the new files before their move.
STAGING_SUBDIR = "rewrite"
#: A file that the manifest's ``retention`` drops this soon is not rewritten (the compact file
#: is written after the plan; the rows of a file it drops must not live on in a new one).
RETENTION_MARGIN_MS = 60_000


@dataclass(frozen=True)
class CompactionPolicy:
    """What a compaction batch rewrites (module docstring); sizes in bytes, ages in ms."""

    target_size: int = 128 << 20
    min_files: int = 8
    min_age_ms: int = 8 * 86_400_000
    max_bytes: int = 128 << 20
    #: a partition that received a file this recently is left alone (0: every partition)
    quiet_period_ms: int = 0
    #: downstream file-source queries whose checkpoints say which files may be rewritten
    #: (``commit.compaction_consumers``)
    consumers: tuple[Consumer, ...] = ()


def _replaced(items: list[Any]) -> list[tuple[str, int]]:
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)):
            raise RecordError("field 'replaced' must hold [path, size] pairs")
        out.append((inside(item[0]), non_negative(item[1], "replaced")))
    return out


@dataclass(frozen=True)
class Rewrite:
    """One new file and the files it replaces, by path relative to the table. In a WAL entry
    (``CommitDelta``'s ``rewrites``)::

        {"final":"p=a/part-compacted-8-00000-<uuid>.snappy.parquet","size":2410,"mtime":1795313165250,"rows":40,
         "replaced":[["p=a/part-00000-<uuid>.c000.snappy.parquet",903],...]}
    """

    final: str = dc_field(metadata=json_field("final", str, check=inside_field))
    size: int = dc_field(metadata=json_field("size", int, check=non_negative))
    mtime_ms: int = dc_field(metadata=json_field("mtime", int))
    rows: int = dc_field(metadata=json_field("rows", int, check=non_negative))
    replaced: list[tuple[str, int]] = dc_field(
        default_factory=list, metadata=json_field("replaced", list, encode=lambda v: [[p, n] for p, n in v], decode=_replaced)
    )


@dataclass(frozen=True)
class Candidate:
    """A group ``plan`` chose: files of one directory, each its entry and table-relative path."""

    directory: str
    files: tuple[tuple[ManifestEntry, str], ...]


@dataclass(frozen=True)
class StagedRewrite:
    """A rewrite written under a staging directory, not yet claimed."""

    rewrite: Rewrite
    staged: str
    #: the replaced files' manifest entries (as the manifest spells them)
    replaced_entries: tuple[ManifestEntry, ...]

    @property
    def replaced_paths(self) -> list[str]:
        return [entry.path for entry in self.replaced_entries]

    def entry(self, storage: Storage) -> ManifestEntry:
        """The new file's manifest entry."""
        return ManifestEntry.for_file(storage.uri(self.rewrite.final), size=self.rewrite.size, modification_time=self.rewrite.mtime_ms)


def kept_by_retention(manifest: ManifestLog, now_ms: int) -> Callable[[ManifestEntry], bool]:
    """Whether an entry may be rewritten: not one the manifest's ``retention`` drops within
    ``RETENTION_MARGIN_MS`` (its rows must not live on in a new file)."""
    retain = manifest.retain
    return lambda entry: retain is None or retain(entry, now_ms + RETENTION_MARGIN_MS)


def rewritable(manifest: ManifestLog, as_of: int | None, now_ms: int) -> list[ManifestEntry]:
    """The live listing as of ``as_of`` (None: the latest) that may be rewritten."""
    if as_of is not None and as_of < 0:
        return []
    kept = kept_by_retention(manifest, now_ms)
    return [entry for entry in manifest.files(as_of=as_of) if kept(entry)]


def plan(
    storage: Storage,
    live: Sequence[ManifestEntry],
    policy: CompactionPolicy,
    *,
    now_ms: int,
    eligible: Callable[[ManifestEntry], bool] | None = None,
) -> list[Candidate]:
    """The groups worth a rewrite in the live listing ``live`` (module docstring); ``eligible``:
    what else a file must pass (the registered consumers' rule)."""
    small = policy.target_size // 2
    by_dir: dict[str, list[tuple[ManifestEntry, str]]] = {}
    newest: dict[str, int] = {}  # per directory, its newest file of any size
    for entry in live:
        if entry.is_dir:
            continue
        rel = relative_to_root(storage.root_uri, entry.uri)
        if rel is None or not rel.endswith(".parquet") or rel.startswith(("_", ".")):
            continue
        directory = posixpath.dirname(rel)
        newest[directory] = max(newest.get(directory, entry.modification_time), entry.modification_time)
        if entry.size < small and entry.modification_time <= now_ms - policy.min_age_ms and (eligible is None or eligible(entry)):
            by_dir.setdefault(directory, []).append((entry, rel))
    out: list[Candidate] = []
    budget = policy.max_bytes
    for directory in sorted(by_dir):
        if policy.quiet_period_ms and newest[directory] > now_ms - policy.quiet_period_ms:
            continue  # still receiving data
        files = sorted(by_dir[directory], key=lambda f: (f[0].modification_time, f[1]))
        while len(files) >= policy.min_files and budget > 0:
            chosen: list[tuple[ManifestEntry, str]] = []
            size = 0
            for entry, rel in files:
                if chosen and (size + entry.size > policy.target_size or size + entry.size > budget):
                    break
                chosen.append((entry, rel))
                size += entry.size
            if len(chosen) < policy.min_files:
                break
            out.append(Candidate(directory, tuple(chosen)))
            budget -= size
            files = files[len(chosen) :]
    return out


def _parquet_layout(schema: Any) -> tuple[str, ...]:
    """The physical types of a Parquet schema's timestamp columns: ``INT96`` (Spark's default) or
    ``INT64``. Files are merged only with files laid out the same way, and the new file keeps it."""
    columns = (schema.column(i) for i in range(len(schema)))
    return tuple(c.physical_type for c in columns if c.physical_type == "INT96" or "TIMESTAMP" in str(c.logical_type).upper())


def _write_options(layout: tuple[str, ...]) -> dict[str, Any] | None:
    """How the new file writes its timestamps so that it reads as the replaced files do: INT96
    (read as microseconds, Spark's precision) written as INT96; INT64 timestamps keep their unit
    as Arrow read it. None: a mix of INT96 and INT64 timestamp columns, which one Arrow writer
    cannot keep."""
    if "INT96" in layout:
        return {"use_deprecated_int96_timestamps": True} if set(layout) == {"INT96"} else None
    return {}


def write(
    storage: Storage, candidate: Candidate, *, staging_dir: str, batch_id: int, n: int, min_files: int = 2, staging: Storage | None = None
) -> StagedRewrite | None:
    """Write ``candidate``'s rows into one file under ``staging_dir`` of ``staging`` (default:
    the table's ``storage``), durably. Only files with
    the first one's schema (key-value metadata included: Spark's rebase markers) and timestamp
    layout are merged; None when fewer than ``min_files`` are left, or when the rows cannot be
    written back exactly (the rewrite is then left out, never the batch)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = storage.uri(candidate.directory or ".")
    chosen: list[tuple[ManifestEntry, str, Any]] = []  # entry, path, rows
    layout: tuple[str, ...] = ()
    for entry, rel in candidate.files:
        try:
            # INT96 as microseconds, Spark's precision: as nanoseconds, dates past 2262 wrap around
            parquet = pq.ParquetFile(pa.BufferReader(storage.read_bytes(rel)), coerce_int96_timestamp_unit="us")
            table = parquet.read()
        except (OSError, ValueError) as exc:
            log.warning("compaction leaves %s alone: it does not read as Parquet (%s)", storage.uri(rel), exc)
            continue
        if not chosen:
            layout = _parquet_layout(parquet.schema)
        elif not table.schema.equals(chosen[0][2].schema, check_metadata=True) or _parquet_layout(parquet.schema) != layout:
            continue  # another schema (columns added since), writer or layout: never merged with these
        chosen.append((entry, rel, table))
    options = _write_options(layout)
    if len(chosen) < max(2, min_files) or options is None:
        return None
    merged = pa.concat_tables([table for _, _, table in chosen])
    buf = io.BytesIO()
    try:
        pq.write_table(merged, buf, compression="snappy", **options)
        data = buf.getvalue()
        written = pq.read_table(pa.BufferReader(data), coerce_int96_timestamp_unit="us")
    except (OSError, ValueError) as exc:  # e.g. nanoseconds that microseconds would truncate
        log.warning("compaction leaves %d files of %s alone: %s", len(chosen), where, exc)
        return None
    if not written.equals(merged):
        log.warning("compaction leaves %d files of %s alone: the new file would not read back as their rows", len(chosen), where)
        return None
    name = NAME.format(batch=batch_id, n=n, uid=uuid.uuid4().hex)
    final = posixpath.join(candidate.directory, name) if candidate.directory else name
    staged = f"{staging_dir}/{STAGING_SUBDIR}/{final}"
    (staging or storage).put_if_absent(staged, data)
    rewrite = Rewrite(
        final=final,
        size=len(data),
        mtime_ms=max(entry.modification_time for entry, _, _ in chosen),
        rows=written.num_rows,
        replaced=[(rel, entry.size) for entry, rel, _ in chosen],
    )
    return StagedRewrite(rewrite, staged, tuple(entry for entry, _, _ in chosen))
