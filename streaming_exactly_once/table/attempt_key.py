"""Which commit attempt a record belongs to: one frozen key instead of six loose fields.

A commit attempt is named by the manifest batch it claims, the (query, Spark batch) it commits,
the writer's epoch, the attempt's token and its staging mode. The WAL claim
(``commit.protocol.sequence``), the committer's ``BatchAttempt`` and the group committer hold an
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


class KeyedByAttempt:
    """The key's fields by name (``record.batch_id``, ``record.mode``...) for the classes that
    hold an ``AttemptKey`` as ``key`` - the WAL claim, ``BatchAttempt``, ``CommitRecord`` -
    so one key backs them all and nobody copies its fields."""

    key: AttemptKey  # declared as a field by each dataclass that mixes this in

    @property
    def batch_id(self) -> int:
        return self.key.batch_id

    @property
    def query_id(self) -> str:
        return self.key.query_id

    @property
    def spark_batch_id(self) -> int:
        return self.key.spark_batch_id

    @property
    def epoch(self) -> int:
        return self.key.epoch

    @property
    def attempt(self) -> str:
        return self.key.attempt

    @property
    def mode(self) -> str:
        return self.key.mode
