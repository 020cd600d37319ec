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

from ..log.record_fields import DataclassCodec, json_field
from ..storage.base import Storage
from .attempt_key import AttemptKey
from .layout import OFFSETS_DIR
from .per_query_log import PerQueryLog

HINT = (
    "Offsets records are intent records: `seo recover <table>` rebuilds what it can from the WAL "
    "and the commits log; restore the file from a backup otherwise."
)


@dataclass(frozen=True)
class OffsetsRecord:
    batch_id: int = dc_field(metadata=json_field("batchId", int))
    query_id: str = dc_field(metadata=json_field("queryId", str))
    spark_batch_id: int = dc_field(metadata=json_field("sparkBatchId", int))
    epoch: int = dc_field(metadata=json_field("epoch", int))
    attempt: str = dc_field(metadata=json_field("attempt", str))
    #: the nullable fields below are written as null, not left out
    checkpoint: str | None = dc_field(default=None, metadata=json_field("checkpoint", str, optional=True))
    source_offsets: tuple[str | None, ...] = dc_field(default_factory=tuple, metadata=json_field("sourceOffsets", list, optional=True, decode=tuple))
    batch_watermark_ms: int | None = dc_field(default=None, metadata=json_field("batchWatermarkMs", int, optional=True))
    batch_timestamp_ms: int | None = dc_field(default=None, metadata=json_field("batchTimestampMs", int, optional=True))
    written_ms: int = dc_field(default=0, metadata=json_field("writtenMs", int, optional=True))

    @classmethod
    def of(cls, key: AttemptKey, **rest: Any) -> OffsetsRecord:
        """The intent record of the attempt ``key`` (its staging mode is not part of it)."""
        return cls(key.batch_id, key.query_id, key.spark_batch_id, key.epoch, key.attempt, **rest)


class OffsetsCodec(DataclassCodec[OffsetsRecord]):
    def __init__(self) -> None:
        super().__init__(OffsetsRecord)


class OffsetsLog(PerQueryLog[OffsetsRecord]):
    def __init__(self, storage: Storage, *, interval: int) -> None:
        super().__init__(storage, OFFSETS_DIR, OffsetsCodec(), default_interval=interval, kind="offsets log", hint=HINT)
