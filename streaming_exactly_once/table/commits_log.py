"""``_seo/commits/M``: what manifest batch M committed, and for which (query, Spark batch).

Bytes (one record per delta; a compact file keeps the latest record of every query, which is
all the idempotence check needs: Spark batch ids only grow within a query)::

    v1
    {"batchId":12,"queryId":"c578917c-...","sparkBatchId":40,"epoch":3,"attempt":"9f2c41d0","mode":"rename","numFiles":4,"numRows":20000,"numBytes":812345,"numSkippedRows":0,"commitTimeMs":1795313165400,"stepMs":{"stage":812.4,"wal":0.6,"move":1.9,"manifest":0.7},"watermarks":{"ts":{"min":"2024-01-01T00:00:00","max":"2024-01-01T00:09:59"}},"sourceFiles":1,"committedByEpoch":3,"tableRows":240000,"schema":"{\"type\":\"struct\",...}"}

A ``format="delta"`` table's record also carries ``"deltaVersion"``: the Delta version that
holds the batch (readers map ``as_of=M`` to it; absent when the commit was finished by a
recovery that found the version already there - readers then search the Delta log).

A dataset group's root record also carries ``"datasets"`` - for every table of the group, its
latest batch, rows, watermarks and last checks, carried forward when a table is absent from a
batch - and ``"sourcePartitions"`` (per source partition: low and high offset); one line in
the file, shown wrapped here::

    {"batchId":7,...,"datasets":{"orders":{"batchId":5,"lastGroupBatch":7,"rows":1200,"status":"committed",
      "watermarks":{"ts":{"low":"2024-01-01T00:05:00","high":"2024-01-01T00:09:59",
      "batchMin":"2024-01-01T00:05:01","batchMax":"2024-01-01T00:09:59"}},
      "checks":[{"name":"rows between 1 and None","passed":true,"mandatory":true,"detail":"200 rows"}]}},
      "sourcePartitions":{"0":{"orders/0":{"low":120,"high":180}}}}

The record is written by the commit sequence right after the manifest entry; the WAL entry that
carries the same (query, Spark batch) is durable before the manifest, so the idempotence key is
never later than the publish (a crash between the two is rolled forward on restart).
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Any

from ..log.codec import field
from ..storage.base import Storage
from .layout import COMMITS_DIR
from .per_query_log import PerQueryLog

HINT = (
    "The commits log is the sink's idempotence record. Run `seo verify <table>` to see what is "
    "affected; `seo recover <table>` rebuilds lost records from the WAL and offsets log."
)


@dataclass(frozen=True)
class CommitRecord:
    batch_id: int
    query_id: str
    spark_batch_id: int
    epoch: int
    attempt: str
    mode: str
    num_files: int
    num_rows: int | None
    num_bytes: int
    commit_time_ms: int
    step_ms: dict[str, float] = dc_field(default_factory=dict)
    watermarks: dict[str, dict[str, Any]] = dc_field(default_factory=dict)
    num_skipped_rows: int = 0
    source_files: int = 0
    committed_by_epoch: int | None = None
    reconstructed: bool = False
    schema: str | None = None  # Spark schema JSON of the rows written (partition columns included)
    table_rows: int | None = None  # rows committed to the table up to and including this batch
    #: dataset group root only: the state of every table of the group after this batch
    #: (``commit.group_state``), carried forward so that the newest record alone is the state
    datasets: dict[str, Any] | None = None
    #: dataset group root only: per source partition, {"low": previous end, "high": this end}
    source_partitions: dict[str, Any] | None = None
    #: ``format="delta"``: the Delta version of this batch's commit, when the writer knew it
    delta_version: int | None = None


class CommitCodec:
    def to_json(self, r: CommitRecord) -> dict[str, Any]:
        out = {
            "batchId": r.batch_id,
            "queryId": r.query_id,
            "sparkBatchId": r.spark_batch_id,
            "epoch": r.epoch,
            "attempt": r.attempt,
            "mode": r.mode,
            "numFiles": r.num_files,
            "numRows": r.num_rows,
            "numBytes": r.num_bytes,
            "numSkippedRows": r.num_skipped_rows,
            "commitTimeMs": r.commit_time_ms,
            "stepMs": r.step_ms,
            "watermarks": r.watermarks,
            "sourceFiles": r.source_files,
            "committedByEpoch": r.committed_by_epoch if r.committed_by_epoch is not None else r.epoch,
        }
        if r.table_rows is not None:
            out["tableRows"] = r.table_rows
        if r.schema is not None:
            out["schema"] = r.schema
        if r.reconstructed:
            out["reconstructed"] = True
        if r.datasets is not None:
            out["datasets"] = r.datasets
        if r.source_partitions is not None:
            out["sourcePartitions"] = r.source_partitions
        if r.delta_version is not None:
            out["deltaVersion"] = r.delta_version
        return out

    def from_json(self, obj: dict[str, Any]) -> CommitRecord:
        return CommitRecord(
            batch_id=field(obj, "batchId", int),
            query_id=field(obj, "queryId", str),
            spark_batch_id=field(obj, "sparkBatchId", int),
            epoch=field(obj, "epoch", int),
            attempt=field(obj, "attempt", str),
            mode=field(obj, "mode", str),
            num_files=field(obj, "numFiles", int),
            num_rows=field(obj, "numRows", int, optional=True),
            num_bytes=field(obj, "numBytes", int),
            num_skipped_rows=field(obj, "numSkippedRows", int, optional=True, default=0),
            commit_time_ms=field(obj, "commitTimeMs", int),
            step_ms=field(obj, "stepMs", dict, optional=True, default={}),
            watermarks=field(obj, "watermarks", dict, optional=True, default={}),
            source_files=field(obj, "sourceFiles", int, optional=True, default=0),
            committed_by_epoch=field(obj, "committedByEpoch", int, optional=True),
            reconstructed=field(obj, "reconstructed", bool, optional=True, default=False),
            schema=field(obj, "schema", str, optional=True),
            table_rows=field(obj, "tableRows", int, optional=True),
            datasets=field(obj, "datasets", dict, optional=True),
            source_partitions=field(obj, "sourcePartitions", dict, optional=True),
            delta_version=field(obj, "deltaVersion", int, optional=True),
        )


class CommitsLog(PerQueryLog[CommitRecord]):
    def __init__(self, storage: Storage, *, interval: int) -> None:
        super().__init__(storage, COMMITS_DIR, CommitCodec(), default_interval=interval, kind="commits log", hint=HINT)
