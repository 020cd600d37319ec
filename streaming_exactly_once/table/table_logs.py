"""The logs of one table, opened together with one compact interval.

A single table has all four. A dataset group splits them: its root keeps the offsets, commits
and sources logs (one group batch each) and no manifest; each of its tables (members) keeps a
manifest and a commits log of its own batches, which is what readers of that table need.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..manifest.manifest_log import DIRECTORY as SPARK_MANIFEST_DIR, ManifestLog
from ..storage.base import Storage
from .commits_log import CommitsLog
from .offsets_log import OffsetsLog
from .sources_log import SourcesLog


@dataclass
class TableLogs:
    storage: Storage
    manifest: ManifestLog | None
    offsets: OffsetsLog | None
    commits: CommitsLog
    sources: SourcesLog | None

    @classmethod
    def open(
        cls,
        storage: Storage,
        *,
        interval: int = 10,
        manifest_retention_ms: int | None = None,
        sources_retention_ms: int | None = None,
        kind: str = "table",
        manifest_dir: str = SPARK_MANIFEST_DIR,
    ) -> TableLogs:
        """``kind``: ``table`` (all four logs), ``group`` (no manifest), ``member`` (manifest and commits);
        ``manifest_dir``: where the manifest lives (``TableIdentity.manifest_dir``)."""
        with_manifest = kind != "group"
        with_inputs = kind != "member"
        return cls(
            storage=storage,
            manifest=ManifestLog(storage, default_interval=interval, retention_ms=manifest_retention_ms, directory=manifest_dir)
            if with_manifest
            else None,
            offsets=OffsetsLog(storage, interval=interval) if with_inputs else None,
            commits=CommitsLog(storage, interval=interval),
            sources=SourcesLog(storage, interval=interval, retention_ms=sources_retention_ms) if with_inputs else None,
        )

    @classmethod
    def for_identity(cls, storage: Storage, identity, **kwargs) -> TableLogs:
        """The logs a table with this identity (or none: a plain table) has."""
        if identity is None:
            return cls.open(storage, **kwargs)
        return cls.open(storage, interval=identity.compact_interval, kind=identity.kind, manifest_dir=identity.manifest_dir, **kwargs)

    def all_logs(self):
        return tuple(log_ for log_ in (self.manifest, self.offsets, self.commits, self.sources) if log_ is not None)


def open_manifest(storage: Storage, identity, **kwargs) -> ManifestLog:
    """The manifest of the table with this identity (or none: a table of Spark's file sink)."""
    if identity is None:
        return ManifestLog(storage, **kwargs)
    return ManifestLog(storage, default_interval=identity.compact_interval, directory=identity.manifest_dir, **kwargs)
