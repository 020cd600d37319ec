"""The logs of one table, opened together with one compact interval.

A single table has all four. A dataset group splits them: its root keeps the offsets, commits
and sources logs (one group batch each) and no manifest; each of its tables (members) keeps a
manifest and a commits log of its own batches, which is what readers of that table need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..manifest.manifest_log import DIRECTORY as SPARK_MANIFEST_DIR, ManifestLog
from ..storage.base import Storage
from .commits_log import CommitsLog
from .identity import TableIdentity, TableSpec
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
        retention_ms: int | None = None,
        source_retention_ms: int | None = None,
        kind: str = "table",
        manifest_dir: str = SPARK_MANIFEST_DIR,
    ) -> TableLogs:
        """``kind``: ``table`` (all four logs), ``group`` (no manifest), ``member`` (manifest and commits);
        ``manifest_dir``: where the manifest lives (``TableIdentity.manifest_dir``)."""
        with_manifest = kind != "group"
        with_inputs = kind != "member"
        return cls(
            storage=storage,
            manifest=ManifestLog(storage, default_interval=interval, retention_ms=retention_ms, directory=manifest_dir) if with_manifest else None,
            offsets=OffsetsLog(storage, interval=interval) if with_inputs else None,
            commits=CommitsLog(storage, interval=interval),
            sources=SourcesLog(storage, interval=interval, retention_ms=source_retention_ms) if with_inputs else None,
        )

    @classmethod
    def for_identity(cls, storage: Storage, identity: TableIdentity | TableSpec | None, **kwargs: Any) -> TableLogs:
        """The logs a table with this identity (or none: a table of Spark's own file sink) has -
        the one place a table's layout (its kind, compact interval, manifest directory) turns
        into logs. A writer passes its ``TableSpec``, checked against the identity first."""
        if identity is None:
            return cls.open(storage, **kwargs)
        return cls.open(storage, interval=identity.compact_interval, kind=identity.kind, manifest_dir=identity.manifest_dir, **kwargs)

    def all_logs(self) -> tuple[ManifestLog | OffsetsLog | CommitsLog | SourcesLog, ...]:
        return tuple(log_ for log_ in (self.manifest, self.offsets, self.commits, self.sources) if log_ is not None)

    # The logs a kind has for certain: a table all four, a group root no manifest, a member no
    # offsets and sources. Code that runs for one kind only reaches them through these.

    def require_manifest(self) -> ManifestLog:
        if self.manifest is None:
            raise RuntimeError(f"{self.storage.root_uri} is a dataset group's root: it has no manifest")
        return self.manifest

    def require_offsets(self) -> OffsetsLog:
        if self.offsets is None:
            raise RuntimeError(f"{self.storage.root_uri} is a table of a dataset group: its root keeps the offsets")
        return self.offsets

    def require_sources(self) -> SourcesLog:
        if self.sources is None:
            raise RuntimeError(f"{self.storage.root_uri} is a table of a dataset group: its root keeps the sources")
        return self.sources


def open_manifest(storage: Storage, identity: TableIdentity | None, **kwargs: Any) -> ManifestLog:
    """The manifest of the table with this identity (or none: a table of Spark's file sink)."""
    if identity is None:
        return ManifestLog(storage, **kwargs)
    return ManifestLog(storage, default_interval=identity.compact_interval, directory=identity.manifest_dir, **kwargs)
