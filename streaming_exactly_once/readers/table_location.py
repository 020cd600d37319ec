"""Where a reader's path leads: the table root (and a partition sub-path), or a clear refusal.

* **Partition sub-paths** (``table/day=2024-01-01``): the root is found by walking up to the
  directory holding ``_spark_metadata`` (or the private manifest of a ``spark_manifest=False``
  table); the sub-path is kept so that only committed files under it are read.
* **Globs and several paths** are refused (``UnsafeReadError``): Spark silently bypasses the
  manifest for them and reads uncommitted files.
* **A dataset group's root** has no manifest of its own: readers get an error naming how to
  list its tables; maintenance commands may ask for the root itself (``allow_group``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TableNotFoundError, UnsafeReadError
from ..manifest.manifest_log import DIRECTORIES as MANIFEST_DIRS, DIRECTORY as MANIFEST_DIR
from ..storage import open_storage
from ..storage.base import Storage
from ..table.identity import read_identity
from ..table.layout import TABLE_FILE

GLOB_CHARS = ("*", "?", "[", "{")


@dataclass
class TableLocation:
    storage: Storage  # rooted at the table root
    sub_path: str = ""  # partition sub-directory asked for, relative to the root ("" = all)


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
