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

from ..errors import MissingBatchError
from ..log.batch_log import COMPACT_SUFFIX
from ..log.compactible_log import CompactibleLog
from ..log.compaction import is_compaction_batch, next_compaction_batch
from ..log.record_fields import DataclassCodec, json_field
from ..storage.base import Storage, join
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
        """As Spark's reader does, from the ``.compact`` names. With none yet, Spark's configured
        interval is not on disk: the default serves this listing's caller, and is not kept (a
        reader kept across batches must not keep a guess)."""
        interval = super()._derive_interval(found)
        if not any(name.endswith(COMPACT_SUFFIX) for name in found.values()):
            self._interval = None
        return interval

    def file_name(self, batch_id: int) -> str:
        if self._interval is None:
            # No .compact seen yet: try the delta's name. Spark writes a compaction batch only
            # as N.compact, so a delta that exists is one; a miss makes the caller list the log.
            return str(batch_id)
        return super().file_name(batch_id)

    def entries_between(self, after: int, upto: int) -> list[FileSourceEntry]:
        """Entries admitted in source batches ``after+1 .. upto``, via deltas or compact files.

        Reads each delta by its name; the log is listed only when one is missing (it may be a
        compaction batch, or compacted and deleted) and its interval is not known yet."""
        out: list[FileSourceEntry] = []
        cache: dict[int, list[FileSourceEntry]] = {}
        for source_batch in range(after + 1, upto + 1):
            guessing = self._interval is None
            records = self.get(source_batch)  # by the delta's name while guessing (``file_name``)
            if records is not None and guessing:
                out.extend(records)
                continue
            interval = self.interval  # known, or derived by a listing now (then maybe a guess)
            compacted = is_compaction_batch(source_batch, interval)
            if records is not None and not compacted:
                out.extend(records)
                continue
            compact_id = source_batch if compacted else next_compaction_batch(source_batch, interval)
            if records is not None and not guessing:
                cache[compact_id] = records  # read by its .compact name just now
            if compact_id not in cache:
                cache[compact_id] = self._read_compact(
                    compact_id, context=f"source batch {source_batch} was deleted and must be read from its compact file"
                )
            out.extend(e for e in cache[compact_id] if e.batch_id == source_batch)
        return out

    def _read_compact(self, compact_id: int, *, context: str) -> list[FileSourceEntry]:
        path = join(self.directory, f"{compact_id}{COMPACT_SUFFIX}")
        try:
            data = self.storage.read_bytes(path)
        except FileNotFoundError:
            raise MissingBatchError(directory=self.uri(), missing=[compact_id], context=context, hint=self.hint) from None
        return self.decode(data, batch_id=compact_id)
