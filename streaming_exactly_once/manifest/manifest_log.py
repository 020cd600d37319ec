"""The table manifest ``<table>/_spark_metadata``: Spark's FileStreamSinkLog format.

Files ``0``, ``1``, ..., ``9.compact``, ... each hold ``v1`` and one ``SinkFileStatus`` per
line (``manifest.entry`` shows the bytes). A plain ``spark.read.<format>(table)`` reads exactly
the files listed here (Spark's ``MetadataLogFileIndex``), so writing batch ``N`` of this log
with one create-if-absent write is the instant batch ``N`` becomes visible.

A table whose writer was told not to publish for Spark's file-source readers
(``spark_manifest=False``, e.g. a Delta table read only through its Delta log) keeps the same
log, byte for byte, under ``PRIVATE_DIRECTORY`` instead: the commit protocol, ``seo`` and our
readers rely on it all the same, but Spark's reader does not find it. ``table.identity`` records
which of the two a table uses.

``retention_ms`` is Spark's ``retention`` sink option: entries older than it are dropped when a
compact file is written (data files stay on disk; ``seo gc`` can delete them: the entries a
compact file leaves out are recorded first, ``manifest.retired``).
"""

from __future__ import annotations

from functools import partial

from ..log.batch_log import DEFAULT_HINT
from ..log.compactible_log import CompactibleLog
from ..storage.base import Storage
from .entry import ManifestEntry, ManifestEntryCodec
from .retired import record_retired

DIRECTORY = "_spark_metadata"
PRIVATE_DIRECTORY = "_seo/manifest"
DIRECTORIES = (DIRECTORY, PRIVATE_DIRECTORY)
VERSION = 1

MANIFEST_HINT = "The manifest decides what every reader sees, so the library will not guess. " + DEFAULT_HINT


class ManifestLog(CompactibleLog[ManifestEntry]):
    """``_spark_metadata`` (or ``directory``) of the table rooted at ``storage``."""

    def __init__(self, storage: Storage, *, default_interval: int = 10, retention_ms: int | None = None, directory: str = DIRECTORY) -> None:
        retain = None
        if retention_ms is not None:
            retain = lambda entry, now: now - entry.modification_time <= retention_ms  # noqa: E731
        super().__init__(
            storage,
            directory,
            ManifestEntryCodec(),
            default_interval=default_interval,
            version=VERSION,
            kind="manifest",
            hint=MANIFEST_HINT,
            retain=retain,
        )
        # what a compact file leaves out is recorded first: ``seo gc`` deletes only what the
        # table's records show this sink wrote (``manifest.retired``)
        self.on_drop = partial(record_retired, storage)

    def exists(self) -> bool:
        return self.storage.exists(self.directory)

    def files(self, as_of: int | None = None) -> list[ManifestEntry]:
        """Entries visible to Spark's reader as of ``as_of``: every non-directory entry."""
        return [e for e in self.all_records(as_of) if not e.is_dir]
