"""What a table's snapshots hold, read from its metadata: for time travel and for upkeep.

* ``batch_of`` / ``snapshot_of_batch`` - a snapshot's summary carries the app id and the batch
  (``seo.app-id``, ``seo.batch-id``), so ``as_of=M`` maps to the snapshot of batch M from the
  metadata file alone, for as long as snapshot expiry keeps it;
* ``retained_files`` - every file a snapshot of the current metadata may still read (manifest
  lists, manifests, data and delete files, statistics files) and the metadata files of the
  retained versions (the current one and those in its ``metadata-log``). Like Iceberg's own
  orphan-file removal it does not keep what only an expired snapshot named, even if an older
  metadata file still lists that snapshot. An orphan-file rule must keep all of them (and the
  files of a pending WAL batch, which no snapshot names yet);
* ``snapshot_data_files`` - the data files of one snapshot (the current one by default).
"""

from __future__ import annotations

from collections.abc import Iterator

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFileContent, ManifestFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

#: Keys of our entries in a snapshot's summary (every Iceberg reader shows them).
SUMMARY_APP = "seo.app-id"
SUMMARY_BATCH = "seo.batch-id"


def batch_of(snapshot: Snapshot, app: str) -> int | None:
    """The manifest batch ``snapshot`` holds for ``app`` (None: not one of its batches)."""
    summary = snapshot.summary
    if summary is None or summary.get(SUMMARY_APP) != app:
        return None
    value = summary.get(SUMMARY_BATCH)
    return int(value) if value is not None and value.isdigit() else None


def snapshot_of_batch(metadata: TableMetadata, app: str, batch_id: int) -> Snapshot | None:
    """The retained snapshot holding ``batch_id`` of ``app`` (newest first: recent batches are asked most)."""
    for snapshot in reversed(metadata.snapshots):
        if batch_of(snapshot, app) == batch_id:
            return snapshot
    return None


def snapshots_of_batch(metadata: TableMetadata, app: str, snapshot: Snapshot) -> list[Snapshot]:
    """``snapshot`` and the retained snapshots of the same batch (a compaction batch commits its
    append and its ``replace`` snapshot together); just ``snapshot`` if it is not one of ours."""
    batch = batch_of(snapshot, app)
    if batch is None:
        return [snapshot]
    return [s for s in metadata.snapshots if s.snapshot_id == snapshot.snapshot_id or batch_of(s, app) == batch]


def _manifests(io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
    return snapshot.manifests(io)


def retained_files(metadata: TableMetadata, metadata_location: str, io: FileIO) -> set[str]:
    """Locations (as the metadata spells them) of every file retained snapshots and versions need."""
    out = {metadata_location}
    out.update(entry.metadata_file for entry in metadata.metadata_log)
    out.update(s.statistics_path for s in metadata.statistics)
    out.update(s.statistics_path for s in metadata.partition_statistics)
    seen: set[str] = set()
    for snapshot in metadata.snapshots:
        out.add(snapshot.manifest_list)
        for manifest in _manifests(io, snapshot):
            out.add(manifest.manifest_path)
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                out.add(entry.data_file.file_path)
    return out


def snapshot_data_files(io: FileIO, snapshot: Snapshot) -> Iterator[tuple[str, int, int]]:
    """``(location, size, rows)`` of every live data file of ``snapshot``."""
    for manifest in _manifests(io, snapshot):
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            data_file = entry.data_file
            if data_file.content == DataFileContent.DATA:
                yield data_file.file_path, data_file.file_size_in_bytes, data_file.record_count
