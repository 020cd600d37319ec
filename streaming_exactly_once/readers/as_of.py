"""``as_of``: which batch a reader reads, checked before any file is touched."""

from __future__ import annotations

import operator
from typing import Any

from ..errors import InvalidAsOfError


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
