"""The files of a table that are not garbage: named by a retained manifest file, by a pending
commit or - on a ``format="delta"`` or ``"iceberg"`` table - by a retained Delta version or Iceberg
snapshot or metadata version. ``gc`` deletes files outside this set
(strictly: anything it cannot place is an error);
``verify`` calls them orphans (leniently: it reports problems, it does not delete).
"""

from __future__ import annotations

from ..delta.target import DeltaTarget
from ..errors import DeltaTableError, GcRefusedError, IcebergTableError
from ..manifest.manifest_log import ManifestLog
from ..readers.retained import retained_files
from ..readers.table_roots import relative_path, table_roots
from ..storage.base import Storage
from ..table.identity import TableIdentity
from .iceberg_checks import iceberg_files
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
    if identity is not None and identity.is_delta:
        try:
            keep |= delta_files(storage, identity)
        except DeltaTableError:
            if strict:
                raise  # gc: refuse; verify reports the Delta log on its own
    if identity is not None and identity.iceberg is not None:
        try:
            keep |= iceberg_files(storage, identity.iceberg)
        except IcebergTableError:
            if strict:
                raise  # gc: refuse; verify reports the Iceberg table on its own
            # verify: which metadata files the table needs is unknown, so none is called garbage
            keep |= {info.path for info in storage.walk_files("metadata")}

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


def delta_files(storage: Storage, identity: TableIdentity) -> set[str]:
    """Files a retained version of the table's Delta log can read: the latest version's and every
    file a ``remove`` still names (a Delta reader may time-travel to before the remove; Delta's own
    ``VACUUM`` decides when such files may go). A Delta log that does not load raises: gc must not
    guess which files Delta readers need."""
    assert identity.delta_app_id is not None
    return DeltaTarget(storage, identity.delta_app_id).referenced_files()
