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
* **Moved or copied tables**: manifest paths are absolute URIs of the root the table was written
  under (``_seo/table`` records it; for tables of Spark's own sink it is inferred from the
  entries). Entries under that root are read relative to the *current* root. Entries outside it
  are refused (``ManifestEntryOutsideRootError``) unless ``allow_outside_root=True``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote

from ..errors import (
    DataFileMissingError,
    MissingBatchError,
    ManifestEntryOutsideRootError,
    TableNotFoundError,
    UnsafeReadError,
)
from ..manifest.manifest_log import DIRECTORY as MANIFEST_DIR
from ..manifest.manifest_log import ManifestLog
from ..manifest.paths import decode_uri, encode_uri, normalize_uri, parse_partition_dir
from ..storage import open_storage
from ..storage.base import Storage
from ..table.commits_log import CommitsLog
from ..table.identity import TableIdentity, read_identity
from ..table.layout import TABLE_FILE
from .manifest_scan import scan_manifest

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

    def __init__(self, storage: Storage, as_of: int | None, identity: TableIdentity | None = None) -> None:
        self.storage = storage
        self.as_of = as_of
        self.identity = identity
        self.outside: list[str] = []  # absolute URIs (allow_outside_root only)
        self.schema_json: str | None = None
        self.partition_columns: tuple[str, ...] = ()
        self._columns: dict[str, Any] = {"relative": [], "sizes": [], "mtimes": []}

    def _set(self, relative: Any, sizes: Any, mtimes: Any) -> None:
        self._columns = {"relative": relative, "sizes": sizes, "mtimes": mtimes}

    def _list(self, name: str) -> list:
        value = self._columns[name]
        if not isinstance(value, list):
            value = self._columns[name] = value.to_pylist()
        return value

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
            return value[0] if isinstance(value, list) else value[0].as_py()
        return self.outside[0] if self.outside else None

    def prefixed(self, prefix: str) -> list[str]:
        """``prefix`` + each relative path (vectorised when the column is an Arrow array)."""
        value = self._columns["relative"]
        if isinstance(value, list):
            return [prefix + r for r in value]
        import pyarrow.compute as pc

        return pc.binary_join_element_wise(prefix, value, "").to_pylist()

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
    if storage.exists(MANIFEST_DIR):
        return TableLocation(storage)
    parts: list[str] = []
    probe = storage.root_uri
    while True:
        head, _, tail = probe.rpartition("/")
        if "=" not in tail or not head or head.endswith(":/") or head.endswith(":"):
            break
        parts.insert(0, tail)
        candidate = open_storage(head, storage_options)
        if candidate.exists(MANIFEST_DIR):
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


def infer_original_root(paths: list[str]) -> str | None:
    """For manifests without ``_seo/table``: strip file names and ``k=v`` directories."""
    if not paths:
        return None
    sample = normalize_uri(paths[0])
    head = posixpath.dirname(sample)
    while posixpath.basename(head).find("=") > 0:
        head = posixpath.dirname(head)
    return decode_uri(head)


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
    (``DataFileMissingError`` otherwise); the engine readers do this before reading.
    """
    location = locate(path, storage_options)
    storage = location.storage
    manifest = ManifestLog(storage)
    identity = read_identity(storage)
    if identity is not None:
        manifest = ManifestLog(storage, default_interval=identity.compact_interval)
    columns = scan_manifest(manifest, as_of)
    latest = manifest.latest_batch_id() if as_of is None else as_of
    if identity is not None and as_of is None:
        _check_not_truncated(storage, identity, manifest)
    sample = columns.paths[:1].to_pylist() if columns.arrow else columns.paths[:1]
    original_root = identity.root_uri if identity is not None else infer_original_root(sample)
    result = CommittedFiles(storage=storage, as_of=latest, identity=identity)
    if original_root is not None and len(columns.paths):
        prefix = encode_uri(normalize_uri(original_root)).rstrip("/") + "/"
        sub = location.sub_path.rstrip("/") + "/" if location.sub_path else ""
        mapper = _map_arrow if columns.arrow else _map_python
        mapper(columns, prefix, sub, allow_outside_root, original_root, storage, result)
    schema, partitions = _schema_as_of(storage, identity, result.as_of)
    result.schema_json = schema
    first = result.sample()
    result.partition_columns = partitions or _partitions_from_paths([first] if first and not result.outside else [])
    if verify:
        check_present(result)
    return result


def _check_not_truncated(storage: Storage, identity: TableIdentity, manifest: ManifestLog) -> None:
    """The commits log knows how far the manifest must go: a deleted latest manifest file would
    otherwise make readers silently return an older snapshot. The commits log is listed first:
    a commit record is written after its manifest file, so a concurrent commit cannot make a
    healthy table look truncated."""
    committed = CommitsLog(storage, interval=identity.compact_interval).latest_batch_id(refresh=True)
    latest = manifest.latest_batch_id(refresh=True)
    if committed is not None and (latest is None or committed > latest):
        raise MissingBatchError(
            directory=storage.uri(MANIFEST_DIR),
            missing=list(range((latest if latest is not None else -1) + 1, committed + 1)),
            context=f"the commits log records batches up to {committed}",
            hint="Manifest files were deleted; readers would miss committed data. Restore them from a backup.",
        )


def _outside_error(storage: Storage, entry: str, original_root: str) -> ManifestEntryOutsideRootError:
    return ManifestEntryOutsideRootError(
        f"Manifest of {storage.root_uri} lists {entry}, which is outside the table root {original_root}. "
        "A reader would silently read another location's data; pass allow_outside_root=True if that "
        "is intended.",
        entry=entry,
    )


def _map_python(columns, prefix, sub, allow_outside_root, original_root, storage, result) -> None:
    plen = len(prefix)
    for p, size, mtime in zip(columns.paths, columns.sizes, columns.mtimes):
        if p.startswith("file:/") and not p.startswith("file:///"):
            p = normalize_uri(p)
        if not p.startswith(prefix):
            if not allow_outside_root:
                raise _outside_error(storage, p, original_root)
            result.outside.append(unquote(p))
            continue
        rel = p[plen:]
        if "%" in rel:
            rel = unquote(rel)
        if sub and not rel.startswith(sub):
            continue
        result._columns["relative"].append(rel)
        result._columns["sizes"].append(size)
        result._columns["mtimes"].append(mtime)


def _map_arrow(columns, prefix, sub, allow_outside_root, original_root, storage, result) -> None:
    """Same as ``_map_python``, vectorised: a million entries in a fraction of a second."""
    import pyarrow as pa
    import pyarrow.compute as pc

    paths, sizes, mtimes = columns.paths, columns.sizes, columns.mtimes
    inside = pc.starts_with(paths, prefix)
    if not pc.all(inside).as_py():
        short_file = pc.and_(pc.starts_with(paths, "file:/"), pc.invert(pc.starts_with(paths, "file:///")))
        if pc.any(short_file).as_py():  # file:/x and file:///x are the same file
            paths = pc.if_else(short_file, pc.replace_substring(paths, "file:/", "file:///", max_replacements=1), paths)
            inside = pc.starts_with(paths, prefix)
    if not pc.all(inside).as_py():
        outside = paths.filter(pc.invert(inside))
        if not allow_outside_root:
            raise _outside_error(storage, outside[0].as_py(), original_root)
        result.outside.extend(unquote(p) for p in outside.to_pylist())
        paths, sizes, mtimes = paths.filter(inside), sizes.filter(inside), mtimes.filter(inside)
    rel = pc.utf8_slice_codeunits(paths, len(prefix))
    escaped = pc.match_substring(rel, "%")
    if pc.any(escaped).as_py():  # URI-decode only the entries that need it
        rel = pa.array([unquote(v) if f else v for v, f in zip(rel.to_pylist(), escaped.to_pylist())], pa.string())
    if sub:
        keep = pc.starts_with(rel, sub)
        rel, sizes, mtimes = rel.filter(keep), sizes.filter(keep), mtimes.filter(keep)
    result._set(rel, sizes, mtimes)


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
            return record.schema, identity.partition_by
    return None, identity.partition_by


def _partitions_from_paths(relative: list[str]) -> tuple[str, ...]:
    if not relative:
        return ()
    return tuple(c for c, _ in parse_partition_dir(posixpath.dirname(relative[0])))


def absent_files(files: CommittedFiles) -> list[tuple[str, str]]:
    """(URI, problem) of every committed file that is missing or has another size; one listing
    per directory rather than one request per file."""
    by_dir: dict[str, dict[str, int]] = {}
    for rel, size in zip(files.relative, files.sizes):
        d, _, name = rel.rpartition("/")
        by_dir.setdefault(d, {})[name] = size
    problems = []
    for directory, expected in by_dir.items():
        present = {e.name: e.size for e in files.storage.list_dir(directory) if not e.is_dir}
        for name, size in expected.items():
            found = present.get(name)
            if found is None or found != size:
                uri = files.storage.uri(f"{directory}/{name}" if directory else name)
                problems.append((uri, "does not exist" if found is None else f"has {found} bytes, the manifest says {size}"))
    return problems


def check_present(files: CommittedFiles) -> None:
    """Every committed file exists with its recorded size, else ``DataFileMissingError``."""
    problems = absent_files(files)
    if problems:
        uri, problem = problems[0]
        more = f" ({len(problems) - 1} more file(s) affected)" if len(problems) > 1 else ""
        raise DataFileMissingError(
            f"Committed data file {uri} {problem}{more}. The manifest (as of batch {files.as_of}) lists it, so "
            "reading without it would silently drop committed rows. Restore the file, or run "
            "`seo verify` to list every affected file.",
            path=uri,
            batch_id=files.as_of,
        )
