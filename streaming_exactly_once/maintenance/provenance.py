"""Which files outside a table's live listing this sink can be shown to have written.

``seo gc`` deletes no other file. A data file in the table's directory that no retained manifest
file, Delta version, Iceberg snapshot or pending commit names is one of two things:

* **retired** - the sink published it once and a compaction batch left it out of the listing
  (``retention``, or a rewrite that replaced it): ``_seo/retired/N`` names it
  (``manifest.retired``). Garbage once it is older than ``--older-than``, measured from when it
  left the listing - a reader that planned before may still read it until then;
* **foreign** - anything else: a file another tool or a person put there (a batch job writing to
  the same path, files that were in the directory before the table), or one this sink dropped
  before it kept these records. Nothing shows it is garbage, and its rows may be someone's only
  copy: ``seo gc`` reports it and keeps it, ``seo verify`` warns about it.

The metadata files under ``metadata/`` of a ``format="iceberg"`` table are judged by Iceberg's own
rule instead (one that no retained metadata version reaches is garbage): the sink's Iceberg
commits write them there, and a commit killed half-way leaves them.

Data files of an attempt that never committed are found through the attempt's staging directory
(its intents, ``direct`` mode), not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..commit.protocol.recovery import INTENTS_SUBDIR
from ..errors import LogCorruptError
from ..manifest.retired import read_retired, record_path, retired_batches
from ..readers.table_roots import relative_path, table_roots
from ..storage.base import Storage
from ..table.identity import TableIdentity
from ..table.layout import STAGING_DIR

#: Where a ``format="iceberg"`` table keeps its metadata files (``iceberg.catalogs.METADATA_DIR``).
ICEBERG_METADATA = "metadata/"


@dataclass
class Provenance:
    """What the table's records show the sink retired, by path relative to the table."""

    #: path -> when it left the listing (the latest record naming it)
    retired: dict[str, int] = field(default_factory=dict)
    #: compaction batch -> the paths its record names (a record goes once none is left)
    records: dict[int, set[str]] = field(default_factory=dict)
    #: URIs of records that do not parse: their files count as foreign
    unreadable: list[str] = field(default_factory=list)
    iceberg: bool = False

    def left_ms(self, path: str) -> int | None:
        """When ``path`` left the listing, if the sink retired it; 0 for Iceberg metadata (judged
        by its own age alone); None: not provably the sink's (foreign)."""
        left = self.retired.get(path)
        if left is None and self.iceberg and path.startswith(ICEBERG_METADATA):
            return 0
        return left

    def spent(self, existing: set[str]) -> list[str]:
        """Records none of whose files is among ``existing`` (paths on disk now): to delete."""
        return [record_path(b) for b, paths in sorted(self.records.items()) if not paths & existing]


def provenance(storage: Storage, identity: TableIdentity | None) -> Provenance:
    """Read every retired-files record of the table at ``storage``."""
    found = Provenance(iceberg=identity is not None and identity.is_iceberg)
    for batch_id in retired_batches(storage):
        try:
            records = read_retired(storage, [batch_id])
        except LogCorruptError:
            found.unreadable.append(storage.uri(record_path(batch_id)))
            continue
        if not records:
            continue  # deleted meanwhile
        record = records[0]
        roots = table_roots(storage, identity, record.entries[0].path if record.entries else None)
        paths = found.records.setdefault(batch_id, set())
        for entry in record.entries:
            rel = relative_path(roots, entry.path)
            if rel is None:
                continue  # outside the table: no file of its own
            paths.add(rel)
            found.retired[rel] = max(found.retired.get(rel, 0), record.left_ms)
    return found


def intent_targets(owner: Storage, table: str | None = None) -> set[str]:
    """Data files named by the intents of any staging directory of ``owner`` (``direct`` mode, not
    claimed yet): an attempt's own files, relative to ``table`` under ``owner`` (None: ``owner``)."""
    targets: set[str] = set()
    prefix = "" if table is None else table.rstrip("/") + "/"
    for entry in owner.list_dir(STAGING_DIR):
        for intent in owner.list_dir(f"{entry.path}/{INTENTS_SUBDIR}"):
            try:
                target = owner.read_bytes(intent.path).decode("utf-8").strip()
            except (FileNotFoundError, UnicodeDecodeError):
                continue
            if target.startswith(prefix):
                targets.add(target[len(prefix) :])
    return targets
