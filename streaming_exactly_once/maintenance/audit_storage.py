"""The live data files against one listing of the table's storage, in an audit's whole run.

An incremental ``seo audit`` checks each new batch's files when it audits that batch; a file of
an already-audited batch that is deleted or cut short later would otherwise be found only by
``--from 0``. So the runs that read the whole live listing anyway - once per compact interval,
when the manifest's newest compact file changed (``audit_scope``) - also list the directories
that hold live files (hidden ones - ``_seo``, ``_spark_metadata``, ``_delta_log`` - are never
walked) and compare each live file's size with the manifest's. The cost is that of the live
listing: O(the data files under those directories), once per compact interval, not per batch.
A file missing in the listing is stat'ed once before it is named (an object store's listing may
lag a write).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..storage.base import Storage
from ..table.layout import is_hidden
from ..table.ledger_checks import Violation


def listed_sizes(storage: Storage, tops: set[str]) -> tuple[dict[str, int], int]:
    """Size of every file directly under the root and below the top directories ``tops``, and
    the listings it took."""
    found: dict[str, int] = {}
    calls = 1
    for entry in storage.list_dir(""):
        if is_hidden(entry.path):
            continue
        if not entry.is_dir:
            found[entry.path] = entry.size
        elif entry.path in tops:
            calls += 1
            found.update((f.path, f.size) for f in storage.walk_files(entry.path))
    return found, calls


def stored_file_violations(storage: Storage, live: Sequence[tuple[str, int]], checked: set[str], latest: int) -> tuple[list[Violation], int]:
    """Live files (``(path, size)``, table-relative) missing from storage or of another size than
    the manifest's, leaving out ``checked`` (verified by this run already); and the calls it took."""
    wanted = {path: size for path, size in live if path not in checked}
    if not wanted:
        return [], 0
    found, calls = listed_sizes(storage, {p.split("/", 1)[0] for p in wanted if "/" in p})
    out = []
    for path, size in sorted(wanted.items()):
        stored = found.get(path)
        if stored is None:
            calls += 1
            try:
                stored = storage.info(path).size
            except FileNotFoundError:
                out.append(
                    Violation(
                        "files",
                        None,
                        f"Data file {path} is live in the manifest (batch {latest}) but missing from storage: its rows are lost "
                        f"to every reader. Restore it from a backup ({size} bytes).",
                        path=path,
                    )
                )
                continue
        if stored != size:
            out.append(
                Violation(
                    "files",
                    None,
                    f"Data file {path} has {stored} bytes, the manifest (batch {latest}) {size}: it was replaced or cut short "
                    "after it was published. Restore it from a backup.",
                    path=path,
                )
            )
    return out, calls
