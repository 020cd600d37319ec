"""The files of a table that are not garbage: named by a retained manifest file, by a pending
commit or - on a ``format="delta"`` or ``"iceberg"`` table - by a retained version of the format's
table (``formats.base.TableFormat.referenced_files``: a Delta version, an Iceberg snapshot or
metadata version). ``gc`` deletes files outside this set
(strictly: anything it cannot place is an error);
``verify`` calls them orphans (leniently: it reports problems, it does not delete).
"""

from __future__ import annotations

from ..errors import GcRefusedError
from ..formats.registry import formats_of
from ..manifest.manifest_log import ManifestLog
from ..readers.retained import retained_files
from ..readers.table_roots import relative_path, table_roots
from ..storage.base import Storage
from ..table.identity import TableIdentity
from .pending import PendingCommits


def kept_files(
    storage: Storage,
    identity: TableIdentity | None,
    manifest: ManifestLog,
    batch_ids: list[int],
    pending: PendingCommits,
    table: str | None,
    *,
    strict: bool,
) -> set[str]:
    """Paths relative to the table at ``storage`` (``table``: its path in the pending commits'
    root, None if it is that root). ``strict``: a manifest entry outside the table, or a pending
    commit naming a file under none of its roots, raises instead of being left out."""
    keep = retained_files(storage, identity, manifest, batch_ids, allow_outside_root=not strict)
    keep |= pending.files_under(table)
    if identity is not None:
        keep |= _format_files(storage, identity, strict=strict)
    roots = table_roots(storage, identity)
    for batch_id, uri in pending.entries.get(table, []):
        rel = relative_path(roots, uri)
        if rel is not None:
            keep.add(rel)
        elif strict:
            raise GcRefusedError(
                f"seo gc deleted nothing in {storage.root_uri}: pending commit {batch_id} names {uri}, which is "
                f"under none of the table's roots ({roots.describe()}). Run `seo recover` to complete it first.",
                table=storage.root_uri,
                batch_id=batch_id,
            )
    return keep


def _format_files(storage: Storage, identity: TableIdentity, *, strict: bool) -> set[str]:
    """Files a retained version of the table's formats can read (a Delta reader may time-travel
    to before a ``remove``, an Iceberg reader to a retained snapshot). A format's table that does
    not load raises when ``strict``: gc must not guess which files its readers need."""
    keep: set[str] = set()
    for spec in formats_of(identity):
        try:
            keep |= spec.open(storage, identity).referenced_files()
        except spec.error:
            if strict:
                raise  # gc: refuse; verify reports the format's table on its own
            # verify: which of the format's own files its table needs is unknown, so none is called garbage
            keep |= {info.path for info in storage.walk_files(spec.metadata_dir)}
    return keep
