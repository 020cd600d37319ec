"""Per-file statistics for Delta ``add`` actions: the row count from the Parquet footer.

Only ``numRecords`` is given. It is exact and cheap (one read of the file's last bytes), lets
Delta readers count rows without opening files, and cannot be wrong the way min/max values
can: Delta readers skip files by min/max, so a min/max spelled differently from what the
reader expects (timestamps, truncated strings) would silently hide rows. Readers treat
missing min/max as "may contain anything" and read the file.

Reading the footer also proves, right before the Delta commit names a file, that it exists
and is a complete Parquet file.
"""

from __future__ import annotations

import json

from ..errors import DeltaTableError
from ..storage.base import Storage
from ..storage.parquet_footer import read_footer


def footer_rows(storage: Storage, path: str) -> int | None:
    """Rows of the Parquet file at ``path``, read from its footer only (``read_footer``); None if
    it is not a complete Parquet file."""
    metadata = read_footer(storage, path)
    return None if metadata is None else int(metadata.num_rows)


def parquet_rows(storage: Storage, path: str) -> int:
    """Rows of the Parquet file at ``path`` a Delta commit names (``footer_rows``)."""
    rows = footer_rows(storage, path)
    if rows is None:
        raise DeltaTableError(
            f"{storage.uri(path)} is not a complete Parquet file (no footer, or one that does not parse); a Delta "
            "table can only name Parquet files. Its batch is published in the table's manifest already, so it cannot "
            "be discarded: the file was truncated or replaced after it was committed there. Restore it from a backup, "
            "then restart the query or run `seo recover <table>`.",
            path=path,
        )
    return rows


def stats_json(rows: int) -> str:
    return json.dumps({"numRecords": rows}, separators=(",", ":"))
