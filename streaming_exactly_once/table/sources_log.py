"""``_seo/sources/M``: the input files manifest batch M read, one line per file.

Bytes (compact files keep every file ever committed, like Spark's file-source log)::

    v1
    {"batchId":12,"source":0,"path":"file:///data/landing/in_00040.csv","timestamp":1795313160000}

Why: Spark's file source remembers what it read only in its checkpoint. When the checkpoint is
lost or recreated, the new query re-reads the whole input directory; the sink looks each input
file up here and drops the rows of files it already committed - so the restart neither
duplicates (Spark's foreachBatch) nor silently skips (Spark's file sink) anything.
``retention_ms`` (optional) forgets files older than that, like the source's ``maxFileAge``.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from ..log.compactible_log import CompactibleLog
from ..log.record_fields import DataclassCodec, json_field
from ..storage.base import Storage
from .layout import SOURCES_DIR

HINT = (
    "The sources log is what prevents duplicates after a lost checkpoint. Restore it from a backup; "
    "`seo verify <table>` shows which batches are affected."
)


@dataclass(frozen=True)
class SourceFileRecord:
    batch_id: int = dc_field(metadata=json_field("batchId", int))
    source: int = dc_field(metadata=json_field("source", int))
    #: URI-encoded, exactly as Spark's source log and input_file_name() give it
    path: str = dc_field(metadata=json_field("path", str))
    timestamp: int = dc_field(metadata=json_field("timestamp", int))


class SourceFileCodec(DataclassCodec[SourceFileRecord]):
    def __init__(self) -> None:
        super().__init__(SourceFileRecord)


class SourcesLog(CompactibleLog[SourceFileRecord]):
    def __init__(self, storage: Storage, *, interval: int, retention_ms: int | None = None) -> None:
        retain = None
        if retention_ms is not None:
            retain = lambda r, now: now - r.timestamp <= retention_ms  # noqa: E731
        super().__init__(storage, SOURCES_DIR, SourceFileCodec(), default_interval=interval, kind="sources log", hint=HINT, retain=retain)

    def committed_paths(self) -> set[str]:
        return {r.path for r in self.all_records()}
