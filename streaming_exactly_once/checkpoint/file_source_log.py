"""``<checkpoint>/sources/<i>/N[.compact]``: the files a file source admitted, per source batch.

Bytes::

    v1
    {"path":"file:///data/in/in_000.csv","timestamp":1700000000000,"batchId":0}

``N`` is the source's own ``logOffset`` counter (it advances only when new files are
admitted), not the query's batch id. Compacted every 10 source batches by default
(``spark.sql.streaming.fileSource.log.compactInterval``); a compact file keeps each entry's
original ``batchId``, which is how entries of a deleted delta are still found.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from ..log.batch_log import COMPACT_SUFFIX
from ..log.compactible_log import CompactibleLog
from ..log.compaction import is_compaction_batch, next_compaction_batch
from ..log.record_fields import DataclassCodec, json_field
from ..storage.base import Storage
from .offset_seq import HINT


@dataclass(frozen=True)
class FileSourceEntry:
    path: str = dc_field(metadata=json_field("path", str))  # URI-encoded, as Spark wrote it
    timestamp: int = dc_field(metadata=json_field("timestamp", int))
    batch_id: int = dc_field(metadata=json_field("batchId", int))


class FileSourceEntryCodec(DataclassCodec[FileSourceEntry]):
    def __init__(self) -> None:
        super().__init__(FileSourceEntry)


class FileSourceLog(CompactibleLog[FileSourceEntry]):
    """Read-only view of one file source's log in a Spark checkpoint."""

    def __init__(self, storage: Storage, source: str, *, default_interval: int = 10) -> None:
        super().__init__(
            storage,
            f"sources/{source}",
            FileSourceEntryCodec(),
            default_interval=default_interval,
            kind="checkpoint file-source log",
            hint=HINT,
        )

    def _derive_interval(self, found: dict[int, str]) -> int:
        """As Spark's reader does, from the ``.compact`` names; with none yet, the interval is
        Spark's configured one, which the names do not tell: use the default for this read and
        look again at the next (a long-lived reader must not keep a guess)."""
        interval = super()._derive_interval(found)
        if not any(name.endswith(COMPACT_SUFFIX) for name in found.values()):
            self._interval = None
        return interval

    def entries_between(self, after: int, upto: int) -> list[FileSourceEntry]:
        """Entries admitted in source batches ``after+1 .. upto``, via deltas or compact files."""
        out: list[FileSourceEntry] = []
        cache: dict[int, list[FileSourceEntry]] = {}
        for source_batch in range(after + 1, upto + 1):
            records = self.get(source_batch)
            if records is not None and not is_compaction_batch(source_batch, self.interval):
                out.extend(records)
                continue
            compact_id = (
                source_batch
                if is_compaction_batch(source_batch, self.interval)
                else next_compaction_batch(source_batch, self.interval)
            )
            if compact_id not in cache:
                cache[compact_id] = self.read(
                    compact_id, context=f"source batch {source_batch} was deleted and must be read from its compact file"
                )
            out.extend(e for e in cache[compact_id] if e.batch_id == source_batch)
        return out
