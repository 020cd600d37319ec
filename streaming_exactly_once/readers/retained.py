"""Every data file that some retained snapshot of a table can read: what ``seo gc`` must keep
and what ``seo verify`` does not call an orphan.

The union of all manifest files present is the union of every readable snapshot: a compact file
holds everything up to it, deltas add the rest. Each file is read once, the way readers read it
(``manifest_scan.file_columns``), and its entries are placed in the table the way readers place
them (``table_roots``), so an entry written under any of the table's roots keeps its file.
"""

from __future__ import annotations

from ..manifest.manifest_log import ManifestLog
from ..storage.base import Storage
from ..table.identity import TableIdentity
from .manifest_scan import file_columns
from .table_roots import map_entries, table_roots


def retained_files(
    storage: Storage,
    identity: TableIdentity | None,
    manifest: ManifestLog,
    batch_ids: list[int],
    *,
    allow_outside_root: bool = False,
) -> set[str]:
    """Paths, relative to the table root, of the files named by manifest files ``batch_ids``.

    An entry outside the table raises ``ManifestEntryOutsideRootError`` unless
    ``allow_outside_root`` (then it is left out: it is no file of this table).
    """
    relative: set[str] = set()
    roots = None
    for batch_id in batch_ids:
        paths, sizes, mtimes = file_columns(manifest, batch_id, context="every manifest file is read to find the files it names")
        if not len(paths):
            continue
        if roots is None:
            sample = paths[0] if isinstance(paths, list) else paths[0].as_py()
            roots = table_roots(storage, identity, sample)
        mapped = map_entries(paths, sizes, mtimes, roots, storage, allow_outside_root=allow_outside_root)
        relative.update(mapped.relative if isinstance(mapped.relative, list) else mapped.relative.to_pylist())
    return relative
