"""``_seo/offsets/M``: the intent record of manifest batch M, written before its data is staged.

Bytes (one record per file; compact files keep the latest record per query)::

    v1
    {"batchId":12,"queryId":"c578917c-...","sparkBatchId":40,"epoch":3,"attempt":"9f2c41d0","checkpoint":"file:/chk/events","sourceOffsets":["{\\"logOffset\\":40}"],"batchWatermarkMs":0,"batchTimestampMs":1795313165250,"writtenMs":1795313165301}

Why: it ties M to (query, Spark batch) before anything else exists, so that a manifest batch
whose commit record was lost can still be attributed, and it keeps the source offsets next to
the data - after a lost checkpoint they say where each query had got to. ``sourceOffsets`` are
the checkpoint's ``offsets/N`` lines verbatim (null for ``-``, empty if the checkpoint is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Any

from ..log.codec import field
from ..storage.base import Storage
from .layout import OFFSETS_DIR
from .per_query_log import PerQueryLog

HINT = (
    "Offsets records are intent records: `seo recover <table>` rebuilds what it can from the WAL "
    "and the commits log; restore the file from a backup otherwise."
)


@dataclass(frozen=True)
class OffsetsRecord:
    batch_id: int
    query_id: str
    spark_batch_id: int
    epoch: int
    attempt: str
    checkpoint: str | None = None
    source_offsets: tuple[str | None, ...] = dc_field(default_factory=tuple)
    batch_watermark_ms: int | None = None
    batch_timestamp_ms: int | None = None
    written_ms: int = 0


class OffsetsCodec:
    def to_json(self, r: OffsetsRecord) -> dict[str, Any]:
        return {
            "batchId": r.batch_id,
            "queryId": r.query_id,
            "sparkBatchId": r.spark_batch_id,
            "epoch": r.epoch,
            "attempt": r.attempt,
            "checkpoint": r.checkpoint,
            "sourceOffsets": list(r.source_offsets),
            "batchWatermarkMs": r.batch_watermark_ms,
            "batchTimestampMs": r.batch_timestamp_ms,
            "writtenMs": r.written_ms,
        }

    def from_json(self, obj: dict[str, Any]) -> OffsetsRecord:
        return OffsetsRecord(
            batch_id=field(obj, "batchId", int),
            query_id=field(obj, "queryId", str),
            spark_batch_id=field(obj, "sparkBatchId", int),
            epoch=field(obj, "epoch", int),
            attempt=field(obj, "attempt", str),
            checkpoint=field(obj, "checkpoint", str, optional=True),
            source_offsets=tuple(field(obj, "sourceOffsets", list, optional=True, default=[])),
            batch_watermark_ms=field(obj, "batchWatermarkMs", int, optional=True),
            batch_timestamp_ms=field(obj, "batchTimestampMs", int, optional=True),
            written_ms=field(obj, "writtenMs", int, optional=True, default=0),
        )


class OffsetsLog(PerQueryLog[OffsetsRecord]):
    def __init__(self, storage: Storage, *, interval: int) -> None:
        super().__init__(storage, OFFSETS_DIR, OffsetsCodec(), default_interval=interval, kind="offsets log", hint=HINT)
