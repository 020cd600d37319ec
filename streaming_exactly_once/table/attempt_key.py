"""Which commit attempt a record belongs to: one frozen key instead of six loose fields.

A commit attempt is named by the manifest batch it claims, the (query, Spark batch) it commits,
the writer's epoch, the attempt's token and its staging mode. The WAL claim
(``commit.sequence``), the committer's ``BatchAttempt`` and the group committer hold an
``AttemptKey``; the commit and offsets records are built from one (``CommitRecord.of``,
``OffsetsRecord.of``) and give it back (``.key``).

On disk the key is never an object of its own: its fields are written inline, first in the
record, in this order (``record_fields.flattened``)::

    {"batchId":12,"queryId":"c578917c-...","sparkBatchId":40,"epoch":3,"attempt":"9f2c41d0","mode":"rename",...}

It lives in the table layer (not the commit layer) because the table's records carry it.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from ..log.record_fields import json_field


@dataclass(frozen=True)
class AttemptKey:
    batch_id: int = dc_field(metadata=json_field("batchId", int))
    query_id: str = dc_field(metadata=json_field("queryId", str))
    spark_batch_id: int = dc_field(metadata=json_field("sparkBatchId", int))
    epoch: int = dc_field(metadata=json_field("epoch", int))
    attempt: str = dc_field(metadata=json_field("attempt", str))  # the attempt's token
    mode: str = dc_field(metadata=json_field("mode", str))  # staging mode: "rename" | "direct"

    @property
    def query_batch(self) -> tuple[str, int]:
        """The idempotence key: (query id, Spark batch id)."""
        return (self.query_id, self.spark_batch_id)
