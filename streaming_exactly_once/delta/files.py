"""The data files of one batch as Delta ``add`` actions.

A file is named by its path relative to the table root exactly as it is on disk (Spark's Hive
escaping of partition values included, e.g. ``p=a%3Db/part-0.parquet``); delta-rs URI-encodes
it for the log itself (``p=a%253Db/...``), as the Delta protocol wants. Passing an already
encoded path would make it encode twice and name a file that does not exist.

Partition values come from the path's ``column=value`` directories, unescaped the way Spark
escaped them; ``__HIVE_DEFAULT_PARTITION__`` (Spark's name for NULL and the empty string) is
a NULL partition value, which is what Delta readers return for both.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DeltaTableError
from ..manifest.paths import parse_partition_dir
from .engine import deltalake
from .stats import stats_json


@dataclass(frozen=True)
class DeltaFile:
    """One data file of a batch: ``path`` relative to the table root, unencoded."""

    path: str
    size: int
    mtime_ms: int
    rows: int | None = None  # from the Parquet footer (``delta.stats``), when known


def partition_values(path: str, partition_by: Sequence[str], *, table: str) -> dict[str, str | None]:
    found = dict(parse_partition_dir(posixpath.dirname(path)))
    missing = [c for c in partition_by if c not in found]
    if missing:
        raise DeltaTableError(
            f"Data file {table}/{path} has no directory for partition column(s) {missing}; every file of a Delta "
            "table partitioned by them must have one. The batch was staged with other partition columns than "
            "the table's; write it again with the table's partition_by.",
            table=table,
            path=path,
        )
    return {c: found[c] for c in partition_by}


def add_actions(files: Sequence[DeltaFile], partition_by: Sequence[str], *, table: str) -> list[Any]:
    """delta-rs ``AddAction``s (``dataChange`` true: the batch adds data) for ``files``."""
    AddAction = deltalake().transaction.AddAction
    return [
        AddAction(
            f.path,
            f.size,
            partition_values(f.path, partition_by, table=table),
            f.mtime_ms,
            True,
            stats_json(f.rows) if f.rows is not None else "",
        )
        for f in files
    ]
