"""What a batch's Iceberg commit changes besides adding its snapshot: the columns a schema
evolution adds or makes optional, and the snapshots the sink's expiry removes - both in the same metadata version
as the snapshot, so that no reader ever sees the batch without its columns, and expiry costs no
commit of its own.

* **Columns** (``schema_evolution="add_columns"``, ``commit.table_schema``): the step carries the
  table's Spark schema after the batch; every top-level column the Iceberg table lacks is added,
  optional, with fresh field ids (pyiceberg's ``UpdateSchema``, which also extends the table's
  name mapping). In the same change, what the table requires but the batch's schema may leave
  null - a column, a nested field, list elements, map values - becomes optional, and so does a
  required partition column (an earlier release created them required; Spark's files do not
  hold them, and pyiceberg refused to read such a table). Columns are never dropped, retyped or
  made required here.
* **Expiry** (``iceberg_snapshots_to_keep=N``): the commit keeps the ``N`` newest snapshots (the
  one it adds counts) and every branch or tag head, and removes the rest - a
  ``remove-snapshots`` update applied by the catalog to the full metadata it commits on
  (``catalogs``; the transaction itself is built on a slim view that holds only the current
  snapshot). The batch high-water property is untouched: idempotence never depends on a snapshot.
  Once the commit stands, the metadata only the expired snapshots named - their manifest lists,
  and the manifests no retained snapshot lists - is deleted (``expired_metadata``), as Iceberg's
  own expiry does; data files never are (the table's manifest still names them; ``seo gc``
  decides). It costs the manifest lists of the snapshots expired (one per commit once the table
  is at ``N``) and of the oldest retained snapshot and the branch heads: a manifest dropped by a
  merge never returns to a newer snapshot, so no retained snapshot lists it unless the oldest does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata

from .fileio import relative_to
from .schema import iceberg_schema, relaxed_paths


def added_columns(current: Schema, table_schema_json: str, *, table: str) -> list[str]:
    """Top-level columns of the Spark schema ``table_schema_json`` the Iceberg schema lacks."""
    known = {f.name for f in current.fields}
    return [f.name for f in iceberg_schema(table_schema_json, table=table).fields if f.name not in known]


def evolve_schema(
    txn: Transaction, batch_schema_json: str | None, table_schema_json: str | None, partition_by: Sequence[str], *, table: str
) -> list[str]:
    """In the transaction of a batch's snapshot, one schema change (none if nothing changes): the
    columns of ``table_schema_json`` the table lacks, added optional; and what the table
    requires but the batch may leave null, or a partition column, made optional
    (``schema.relaxed_paths``). What changed, for the log."""
    current = txn.table_metadata.schema()
    known = {c.name for c in current.fields}
    new = [] if table_schema_json is None else [f for f in iceberg_schema(table_schema_json, table=table).fields if f.name not in known]
    batch = Schema() if batch_schema_json is None else iceberg_schema(batch_schema_json, table=table)
    relaxed = relaxed_paths(current, batch, partition_by)
    if new or relaxed:
        with txn.update_schema() as update:
            for field in new:
                update.add_column(field.name, field.field_type, doc=field.doc, required=False)
            for path in relaxed:
                update.make_column_optional(path)
    return [f"added {f.name!r}" for f in new] + [f"{'.'.join(p)!r} optional" for p in relaxed]


def batch_view(batch: Schema, without: Sequence[str]) -> Schema:
    """The batch's schema without the columns its commit adds (what must fit the table as is)."""
    return Schema(*[f for f in batch.fields if f.name not in without])


def snapshots_to_expire(metadata: TableMetadata, keep: int) -> list[int]:
    """Snapshots a commit adding one more removes so that ``keep`` remain (refs' heads stay)."""
    heads = {ref.snapshot_id for ref in metadata.refs.values()}
    if metadata.current_snapshot_id is not None:
        heads.add(metadata.current_snapshot_id)
    ordered = sorted(metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    older = ordered[: max(0, len(ordered) - (keep - 1))]
    return [s.snapshot_id for s in older if s.snapshot_id not in heads]


def expired_metadata(io: FileIO, before: TableMetadata, after: TableMetadata, expired: Sequence[int]) -> list[str]:
    """Locations of the metadata files only the ``expired`` snapshots of ``before`` named, now that
    ``after`` (the committed metadata) no longer holds them."""
    gone = [s for s in before.snapshots if s.snapshot_id in expired and after.snapshot_by_id(s.snapshot_id) is None]
    if not gone:
        return []
    retained = sorted(after.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    heads = {ref.snapshot_id for ref in after.refs.values()}
    witnesses = retained[:1] + [s for s in retained if s.snapshot_id in heads]
    live = {m.manifest_path for s in witnesses for m in s.manifests(io)}
    out = []
    for snapshot in gone:  # its manifests first, its list last: a list left behind still finds them
        try:
            out += [m.manifest_path for m in snapshot.manifests(io) if m.manifest_path not in live]
        except FileNotFoundError:
            continue  # deleted already (with its manifests)
        out.append(snapshot.manifest_list)
    return list(dict.fromkeys(out))


def finish_expiry(table: Table, roots: tuple[str, ...], exists: Callable[[str], bool]) -> list[str]:
    """Paths (relative to the table) of what the snapshots the current version's commit removed
    alone named and that are still there - a writer died before deleting them. The version
    before the current one tells which snapshots that commit removed."""
    if not table.metadata.metadata_log:
        return []
    try:
        before = FromInputFile.table_metadata(table.io.new_input(table.metadata.metadata_log[-1].metadata_file))
    except FileNotFoundError:
        return []  # retired already: `seo gc` collects what is left
    gone = [s.snapshot_id for s in before.snapshots if table.metadata.snapshot_by_id(s.snapshot_id) is None]
    found = (relative_to(loc, roots) for loc in expired_metadata(table.io, before, table.metadata, gone))
    return [p for p in found if p is not None and exists(p)]
