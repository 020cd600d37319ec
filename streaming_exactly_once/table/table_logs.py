"""The four logs of one table, opened together with one compact interval."""

from __future__ import annotations

from dataclasses import dataclass

from ..manifest.manifest_log import ManifestLog
from ..storage.base import Storage
from .commits_log import CommitsLog
from .offsets_log import OffsetsLog
from .sources_log import SourcesLog


@dataclass
class TableLogs:
    storage: Storage
    manifest: ManifestLog
    offsets: OffsetsLog
    commits: CommitsLog
    sources: SourcesLog

    @classmethod
    def open(
        cls,
        storage: Storage,
        *,
        interval: int = 10,
        manifest_retention_ms: int | None = None,
        sources_retention_ms: int | None = None,
    ) -> "TableLogs":
        manifest = ManifestLog(storage, default_interval=interval, retention_ms=manifest_retention_ms)
        return cls(
            storage=storage,
            manifest=manifest,
            offsets=OffsetsLog(storage, interval=interval),
            commits=CommitsLog(storage, interval=interval),
            sources=SourcesLog(storage, interval=interval, retention_ms=sources_retention_ms),
        )

    def all_logs(self):
        return (self.manifest, self.offsets, self.commits, self.sources)
