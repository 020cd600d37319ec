"""The one function that decides what a reader may see: ``committed_files``.

Every reader (Spark, Arrow, pandas, Polars, DuckDB, the CLI) goes through it, so all of them
return the same rows. A file is visible exactly when the manifest lists it as of the requested
batch; orphans, staged files, files of a batch whose manifest entry is not written, and half-
written manifest temp files are never visible.

One read, in order - each step is its own module::

    check_as_of (as_of)  ->  locate (table_location: root + partition sub-path, globs refused)
      ->  read_identity + open_manifest  ->  latest_batch (manifest_checks: stray or deleted
          manifest files are named errors)
      ->  scan_manifest (manifest_scan: compact file + deltas as columns, a piece at a time)
      ->  ChunkMapper (table_roots: each piece as it is read - entries under any root the table
          was written under, read relative to the current root; entries outside refused unless
          allow_outside_root)
      ->  version_of_batch (delta_versions, format="delta") + schema_as_of (batch_schema)
      ->  check_present (file_checks, verify=True: missing, resized or linked-out files)

The manifest directory and the commits log are each listed once per read: the log objects are
opened once here and handed to every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidAsOfError
from ..table.commits_log import CommitsLog
from ..table.identity import read_identity
from ..table.table_logs import open_manifest
from .as_of import check_as_of
from .batch_schema import partitions_from_paths, schema_as_of
from .committed_files import CommittedFiles
from .delta_versions import version_of_batch
from .file_checks import check_present
from .manifest_checks import latest_batch
from .manifest_scan import release_arrow_memory, scan_manifest, scan_memory_pool
from .table_location import locate
from .table_roots import ChunkMapper, MappedEntries, map_entries, table_roots

__all__ = ["committed_files"]


def committed_files(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    verify: bool = False,
) -> CommittedFiles:
    """The files visible in ``path`` as of manifest batch ``as_of`` (default: the latest).

    ``verify=True`` also checks that every file exists with the recorded size
    (``DataFileMissingError`` otherwise) and is no link out of the table; the engine readers do
    this before reading.
    """
    as_of = check_as_of(as_of)
    location = locate(path, storage_options)
    storage = location.storage
    identity = read_identity(storage)
    manifest = open_manifest(storage, identity)
    commits = CommitsLog(storage, interval=identity.compact_interval) if identity is not None else None
    latest = latest_batch(storage, identity, manifest, commits=commits)
    if as_of is not None and (latest is None or as_of > latest):
        raise InvalidAsOfError(
            f"as_of={as_of}: table {storage.root_uri} has no batch {as_of}; its latest batch is {latest}. "
            "`seo log <table>` lists the batches that can be read.",
            as_of=as_of,
            latest=latest,
        )
    snapshot = latest if as_of is None else as_of
    result = CommittedFiles(storage=storage, as_of=snapshot, identity=identity, allow_outside_root=allow_outside_root)
    if snapshot is not None:
        sub = location.sub_path.rstrip("/") + "/" if location.sub_path else ""
        mapper = ChunkMapper(storage, identity, sub=sub, allow_outside_root=allow_outside_root)
        with scan_memory_pool():
            columns = scan_manifest(manifest, snapshot, mapper)
            if columns.arrow:
                mapped = mapper.result()
            elif len(columns.paths):  # Python lists: pyarrow is not installed
                roots = table_roots(storage, identity, columns.paths[0])
                mapped = map_entries(columns.paths, columns.sizes, columns.mtimes, roots, storage, sub=sub, allow_outside_root=allow_outside_root)
            else:
                mapped = MappedEntries([], [], [], [])
        del columns, mapper
        result.set_columns(mapped.relative, mapped.sizes, mapped.mtimes)
        result.outside = mapped.outside
        del mapped
        release_arrow_memory()
    if identity is not None and identity.is_delta and snapshot is not None:
        result.delta_version = version_of_batch(storage, identity, snapshot, latest=as_of is None, commits=commits)
    schema, partitions = schema_as_of(commits, identity, result.as_of)
    result.schema_json = schema
    first = result.sample()
    result.partition_columns = partitions or partitions_from_paths([first] if first and not result.outside else [])
    if verify:
        check_present(result)
    return result
