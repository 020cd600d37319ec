"""``as_of``: which batch a reader reads, checked before any file is touched."""

from __future__ import annotations

import operator
from typing import Any

from ..errors import InvalidAsOfError
from ..manifest.empty_batches import empty_between
from ..manifest.manifest_log import ManifestLog


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


def before_first_file(manifest: ManifestLog, first_batch_id: int, batch_id: int, *, commit: str) -> InvalidAsOfError | None:
    """Why a Delta or Iceberg table has no ``commit`` (version, snapshot) as of ``batch_id``
    when it and every batch before it hold no file: a query's first batches may write no row,
    and the format's log starts at the first batch with a file. None if a batch up to it holds one."""
    if not empty_between(manifest, first_batch_id - 1, batch_id):
        return None
    return InvalidAsOfError(
        f"as_of={batch_id}: batch {batch_id} holds no file, nor does any batch before it, so the table has no {commit} "
        "of it (its log starts at the first batch that wrote a file). As of this batch the table is empty; the manifest "
        "readers (read.arrow, read.spark, ...) read it so.",
        as_of=batch_id,
    )
