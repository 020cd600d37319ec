"""The one function that decides what a reader may see: ``committed_files``.

Every reader (Spark, Arrow, pandas, Polars, DuckDB, the CLI) goes through it, so all of them
return the same rows. A file is visible exactly when the manifest lists it as of the requested
batch; orphans, staged files, files of a batch whose manifest entry is not written, and half-
written manifest temp files are never visible.

It also takes care of what Spark's own reader gets wrong or refuses:

* **Partition sub-paths** (``table/day=2024-01-01``): the table root is found by walking up to
  the directory holding ``_spark_metadata``; only committed files under the sub-path are kept.
* **Globs and several paths** are refused (``UnsafeReadError``): Spark silently bypasses the
  manifest for them and reads uncommitted files.
* **Moved or copied tables, several roots**: manifest paths are absolute URIs of the root the
  table was written under; ``table_roots`` decides which entries are inside the table (under
  any root it was written under, in any spelling, without ``..`` climbing out) and reads them
  relative to the *current* root. Entries outside are refused (``ManifestEntryOutsideRootError``)
  unless ``allow_outside_root=True``.
* **Damage is named, never skipped**: a deleted latest manifest file, a stray batch file
  (``manifest_checks``), a missing or resized data file and, on a local disk, a data file that is
  a link out of the table (``file_checks``, with ``verify=True``) each raise their own error.
* ``as_of`` must be a batch id of the table (``InvalidAsOfError`` otherwise).
* **Delta tables** (``format="delta"``): the files are the manifest's - the same files as the
  Delta version of the batch - and ``CommittedFiles.delta_version`` names that version, so an
  engine reading the Delta log directly (``polars.read_delta(table, version=...)``,
  ``DeltaTable(table, version=...)``) reads the same snapshot (``delta_version``).
"""

from __future__ import annotations

import logging
import operator
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidAsOfError, MissingDependencyError, TableNotFoundError, UnsafeReadError
from ..manifest.manifest_log import DIRECTORIES as MANIFEST_DIRS, DIRECTORY as MANIFEST_DIR
from ..manifest.paths import parse_partition_dir
from ..storage import open_storage
from ..storage.base import Storage
from ..table.commits_log import CommitsLog
from ..table.identity import TableIdentity, read_identity
from ..table.layout import TABLE_FILE
from ..table.table_logs import open_manifest
from .arrow_schema import schema_fields
from .file_checks import absent_files, check_present
from .manifest_checks import latest_batch
from .manifest_scan import scan_manifest
from .table_roots import infer_original_root, map_entries, table_roots

log = logging.getLogger("streaming_exactly_once.readers")

__all__ = ["CommittedFiles", "TableLocation", "absent_files", "check_present", "committed_files", "delta_version", "infer_original_root", "locate"]

GLOB_CHARS = ("*", "?", "[", "{")


@dataclass
class TableLocation:
    storage: Storage  # rooted at the table root
    sub_path: str = ""  # partition sub-directory asked for, relative to the root ("" = all)


class CommittedFiles:
    """The committed data files of one snapshot of a table.

    Columns are kept as Arrow arrays when pyarrow is installed (a million entries stay cheap)
    and turned into Python lists only when asked for.
    """

    def __init__(
        self, storage: Storage, as_of: int | None, identity: TableIdentity | None = None, *, allow_outside_root: bool = False
    ) -> None:
        self.storage = storage
        self.as_of = as_of
        self.identity = identity
        self.allow_outside_root = allow_outside_root
        self.outside: list[str] = []  # absolute URIs (allow_outside_root only)
        self.schema_json: str | None = None
        self.partition_columns: tuple[str, ...] = ()
        #: Delta tables: the Delta version that is this snapshot (None: not a Delta table, or
        #: the version is no longer in the Delta log)
        self.delta_version: int | None = None
        self._columns: dict[str, Any] = {"relative": [], "sizes": [], "mtimes": []}

    def _set(self, relative: Any, sizes: Any, mtimes: Any) -> None:
        self._columns = {"relative": relative, "sizes": sizes, "mtimes": mtimes}

    def _list(self, name: str) -> list[Any]:
        value = self._columns[name]
        if not isinstance(value, list):
            value = self._columns[name] = value.to_pylist()
        values: list[Any] = value
        return values

    @property
    def relative(self) -> list[str]:
        return self._list("relative")

    @property
    def sizes(self) -> list[int]:
        return self._list("sizes")

    @property
    def mtimes(self) -> list[int]:
        return self._list("mtimes")

    def __len__(self) -> int:
        return len(self._columns["relative"]) + len(self.outside)

    def sample(self) -> str | None:
        """One relative path (or outside URI), without converting a whole column."""
        value = self._columns["relative"]
        if len(value):
            first: str = value[0] if isinstance(value, list) else value[0].as_py()
            return first
        return self.outside[0] if self.outside else None

    def prefixed(self, prefix: str) -> list[str]:
        """``prefix`` + each relative path (vectorised when the column is an Arrow array)."""
        value = self._columns["relative"]
        if isinstance(value, list):
            return [prefix + r for r in value]
        import pyarrow.compute as pc

        joined: list[str] = pc.binary_join_element_wise(prefix, value, "").to_pylist()
        return joined

    def uris(self) -> list[str]:
        return self.prefixed(self.storage.root_uri + "/") + list(self.outside)

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    def file_format(self, override: str | None = None) -> str:
        """The data files' format: as asked, as recorded by the sink, or guessed from a name."""
        if override:
            return override
        if self.identity is not None:
            return self.identity.format
        sample = self.sample() or ""
        for ext in ("parquet", "json", "csv", "orc"):
            if sample.endswith(f".{ext}") or f".{ext}." in sample:
                return ext
        return "parquet"

    def reader_options(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The writer options recorded with the table (CSV ``header``, ``sep``), then ``extra``."""
        options = dict(self.identity.writer_options) if self.identity is not None else {}
        options.update(extra or {})
        return options


def locate(path: str, storage_options: Mapping[str, Any] | None = None, *, allow_group: bool = False) -> TableLocation:
    """Find the table root for ``path`` (the root itself or a partition directory below it).

    A dataset group's root has no manifest of its own: readers get an error naming its tables;
    the maintenance commands (``allow_group``) get the root itself.
    """
    if not isinstance(path, str):
        raise UnsafeReadError(
            "Read one table path at a time: with several paths Spark ignores _spark_metadata and reads "
            "duplicates and uncommitted files. Call the reader once per table and union the results."
        )
    if any(ch in path for ch in GLOB_CHARS):
        raise UnsafeReadError(
            f"{path!r} is a glob: Spark (and every plain directory reader) bypasses _spark_metadata for globs "
            "and reads orphaned and uncommitted files. Pass the table root or a partition directory instead."
        )
    storage = open_storage(path.rstrip("/"), storage_options)
    if _has_manifest(storage):
        return TableLocation(storage)
    parts: list[str] = []
    probe = storage.root_uri
    while True:
        head, _, tail = probe.rpartition("/")
        if "=" not in tail or not head or head.endswith(":/") or head.endswith(":"):
            break
        parts.insert(0, tail)
        candidate = open_storage(head, storage_options)
        if _has_manifest(candidate):
            return TableLocation(candidate, "/".join(parts))
        probe = head
    identity = read_identity(storage) if storage.exists(TABLE_FILE) else None
    if identity is not None and identity.kind == "group":
        if allow_group:
            return TableLocation(storage)
        raise TableNotFoundError(
            f"{storage.root_uri} is the root of a dataset group, not one table: read one of its tables, "
            f"e.g. {storage.root_uri}/<dataset> (`seo status {storage.root_uri}` lists them)."
        )
    raise TableNotFoundError(
        f"No table at {storage.root_uri}: neither it nor a parent partition directory has a "
        f"{MANIFEST_DIR}/ manifest. Check the path (a table written by ExactlyOnceSink or Spark's file "
        "sink has one)."
    )


def _has_manifest(storage: Storage) -> bool:
    """``_spark_metadata``, or the private manifest of a table written with ``spark_manifest=False``."""
    return any(storage.exists(d) for d in MANIFEST_DIRS)


def check_as_of(as_of: Any) -> int | None:
    """``as_of`` as a batch id (None: the latest); ``InvalidAsOfError`` if it cannot be one."""
    if as_of is None:
        return None
    try:
        batch_id = operator.index(as_of) if not isinstance(as_of, bool) else None
    except TypeError:
        batch_id = None
    if batch_id is None or batch_id < 0:
        raise InvalidAsOfError(f"as_of must be a batch id (an integer >= 0), got {as_of!r}. `seo log <table>` lists the batches.")
    return batch_id


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
    latest = latest_batch(storage, identity, manifest)
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
        columns = scan_manifest(manifest, snapshot)
        if len(columns.paths):
            sample = columns.paths[0].as_py() if columns.arrow else columns.paths[0]
            sub = location.sub_path.rstrip("/") + "/" if location.sub_path else ""
            mapped = map_entries(
                columns.paths, columns.sizes, columns.mtimes, table_roots(storage, identity, sample), storage,
                sub=sub, allow_outside_root=allow_outside_root,
            )
            result._set(mapped.relative, mapped.sizes, mapped.mtimes)
            result.outside = mapped.outside
    if identity is not None and identity.is_delta and snapshot is not None:
        result.delta_version = _delta_version(storage, identity, snapshot, latest=as_of is None)
    schema, partitions = _schema_as_of(storage, identity, result.as_of)
    result.schema_json = schema
    first = result.sample()
    result.partition_columns = partitions or _partitions_from_paths([first] if first and not result.outside else [])
    if verify:
        check_present(result)
    return result


def _delta_version(storage: Storage, identity: TableIdentity, batch_id: int, *, latest: bool) -> int | None:
    """The Delta version of manifest batch ``batch_id`` (see ``delta_version``). For the latest
    batch it is the one the commit record noted (no Delta log is read); for an older one it is
    looked up in the Delta log. None if unknown: the Delta log no longer has it (log retention),
    or ``deltalake`` is not installed - the manifest still reads the batch."""
    from ..delta.target import DeltaTarget

    record = CommitsLog(storage, interval=identity.compact_interval).record(batch_id)
    hint = record.delta_version if record is not None else None
    if latest:
        return hint
    try:
        return DeltaTarget(storage, identity.delta_app_id or "").version_for_batch(batch_id, hint=hint)
    except (InvalidAsOfError, MissingDependencyError) as exc:
        log.warning("%s", exc)
        return None


def delta_version(
    path: str, *, as_of: int | None = None, storage_options: Mapping[str, Any] | None = None
) -> int:
    """The Delta version of a ``format="delta"`` table that holds exactly manifest batch ``as_of``
    (default: the latest batch) - what a Delta reader passes as ``version=`` to read the same rows."""
    as_of = check_as_of(as_of)
    storage = locate(path, storage_options).storage
    identity = read_identity(storage)
    if identity is None or not identity.is_delta:
        raise TableNotFoundError(f"{storage.root_uri} is not a Delta table written by this library (format='delta').")
    manifest = open_manifest(storage, identity)
    latest = latest_batch(storage, identity, manifest)
    batch = latest if as_of is None else as_of
    if batch is None or (latest is not None and batch > latest):
        raise InvalidAsOfError(f"as_of={as_of}: table {storage.root_uri} has no batch {batch}; its latest batch is {latest}.", as_of=as_of)
    version = _delta_version(storage, identity, batch, latest=False)
    if version is None:
        raise InvalidAsOfError(
            f"as_of={batch}: the Delta version of batch {batch} is no longer in {storage.uri('_delta_log')} (Delta log "
            "retention); the manifest readers (read.arrow, read.spark, ...) still read it.",
            as_of=batch,
        )
    return version


def _schema_as_of(storage: Storage, identity: TableIdentity | None, as_of: int | None) -> tuple[str | None, tuple[str, ...]]:
    if identity is None or as_of is None:
        return None, ()
    commits = CommitsLog(storage, interval=identity.compact_interval)
    for batch_id in range(as_of, max(identity.first_batch_id, as_of - 3) - 1, -1):
        try:
            record = commits.record(batch_id)
        except Exception:
            record = None
        if record is not None and record.schema:
            try:
                schema_fields(record.schema)
            except ValueError as exc:
                log.warning("ignoring the schema recorded in %s: %s", commits.uri(batch_id), exc)
                continue
            return record.schema, identity.partition_by
    return None, identity.partition_by


def _partitions_from_paths(relative: list[str]) -> tuple[str, ...]:
    if not relative:
        return ()
    return tuple(c for c, _ in parse_partition_dir(posixpath.dirname(relative[0])))
