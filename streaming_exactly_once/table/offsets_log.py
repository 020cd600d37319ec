"""``_seo/offsets/M``: the intent record of manifest batch M, written before its data is staged.

Bytes (one record per file; compact files keep the latest record per query)::

    v1
    {"batchId":12,"queryId":"c578917c-...","sparkBatchId":40,"epoch":3,"attempt":"9f2c41d0","checkpoint":"file:/chk/events","sourceOffsets":["{\\"logOffset\\":40}"],"batchWatermarkMs":0,"batchTimestampMs":1795313165250,"writtenMs":1795313165301}

Two optional fields follow ``writtenMs``, written only when they say something:
``"sparkQueryId":"<uuid>"`` - the id in the checkpoint's ``metadata`` when the sink was given
another ``query_id`` (a recreated checkpoint then is not taken for a replay of the old one) - and
``"offsetResets":{"t/0":12}`` - per partition whose offsets restarted (a topic deleted and
recreated), the manifest batch that first wrote its new records; a query repeats its resets in
each later record, so the table's high-water marks survive a compaction that keeps only the
query's latest record (``table.source_offsets.table_marks``).

Why: it ties M to (query, Spark batch) before anything else exists, so that a manifest batch
whose commit record was lost can still be attributed, and it keeps the source offsets next to
the data - after a lost checkpoint they say where each query had got to. ``sourceOffsets`` are
the checkpoint's ``offsets/N`` lines verbatim (null for ``-``, empty if the checkpoint is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Any

from ..log.codec import RecordError
from ..log.record_fields import DataclassCodec, json_field
from ..storage.base import Storage
from .attempt_key import AttemptKey
from .layout import OFFSETS_DIR
from .per_query_log import PerQueryLog

HINT = (
    "Offsets records are intent records: `seo recover <table>` rebuilds what it can from the WAL "
    "and the commits log; restore the file from a backup otherwise."
)


def _partition_batches(value: Any, name: str) -> dict[str, int]:
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in value.items()):
        raise RecordError(f"field '{name}' must map partition names to batch ids")
    return dict(value)


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
    spark_query_id: str | None = dc_field(default=None, metadata=json_field("sparkQueryId", str, optional=True, omit_default=True))
    offset_resets: dict[str, int] = dc_field(
        default_factory=dict, metadata=json_field("offsetResets", dict, optional=True, omit_default=True, check=_partition_batches)
    )

    @property
    def checkpoint_query_id(self) -> str:
        """The id in the checkpoint's ``metadata`` of the query that wrote the record."""
        return self.spark_query_id or self.query_id

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
