"""How the Iceberg layer reaches pyiceberg: the lazy import, and where a table lives.

pyiceberg is an optional extra (``pip install 'streaming-exactly-once[iceberg]'``): the modules
of this layer that import it (``fileio``, ``catalogs``, ``schema``, ``datafiles``, ``history``)
are imported only after ``require()`` succeeded, so the sink, the readers and the CLI keep
working without it for every other table.

The table's location is the sink's table directory: a plain path on local disk (what Spark's
Hadoop catalog, DuckDB and polars open as they are), the canonical URI elsewhere.
"""

from __future__ import annotations

from .. import extras
from ..storage.base import Storage

#: The table's metadata directory (relative to its root): here, not in ``catalogs``, so that code
#: which only names it (``leftovers``, imported by every writer) does not import pyiceberg.
METADATA_DIR = "metadata"


def require() -> None:
    """Raise ``MissingDependencyError`` naming the extra unless pyiceberg (and pyarrow) import."""
    extras.require("iceberg")


def table_location(storage: Storage) -> str:
    """The table root as written into Iceberg metadata (no trailing slash)."""
    root = storage.root_uri.rstrip("/")
    if storage.scheme == "file":
        return root[len("file://") :]
    return root
