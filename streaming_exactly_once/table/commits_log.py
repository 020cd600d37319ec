"""``_seo/commits/M``: what manifest batch M committed, and for which (query, Spark batch).

Bytes (one record per delta; a compact file keeps the latest record of every query, which is
all the idempotence check needs: Spark batch ids only grow within a query)::

    v1
    {"batchId":12,"queryId":"c578917c-...","sparkBatchId":40,"epoch":3,"attempt":"9f2c41d0","mode":"rename","numFiles":4,"numRows":20000,"numBytes":812345,"numSkippedRows":0,"commitTimeMs":1795313165400,"stepMs":{"stage":812.4,"wal":0.6,"move":1.9,"manifest":0.7},"watermarks":{"ts":{"min":"2024-01-01T00:00:00","max":"2024-01-01T00:09:59"}},"sourceFiles":1,"committedByEpoch":3,"tableRows":240000,"schema":"{\"type\":\"struct\",...}"}

A ``format="delta"`` table's record also carries ``"deltaVersion"``: the Delta version that
holds the batch (readers map ``as_of=M`` to it; absent when the commit was finished by a
recovery that found the version already there - readers then search the Delta log). A
``format="iceberg"`` table's record carries ``"icebergSnapshot"`` likewise: the id of the Iceberg
snapshot holding the batch (``read.iceberg_snapshot`` searches the snapshots' summaries when absent).

A compaction batch that published rewrites of small files (the ``compaction`` option) carries
``"rewrites"``: per new file, its table-relative path, its row count and the paths of the files
it replaced (``seo verify`` checks them while the record is retained)::

    "rewrites":[{"final":"p=a/part-compacted-8-00000-<uuid>.snappy.parquet","rows":40,
      "replaced":["p=a/part-00000-<uuid>.c000.snappy.parquet",...]}]

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

from ..log.record_fields import DataclassCodec, flattened, json_field, strings
from ..storage.base import Storage
from .attempt_key import AttemptKey, KeyedByAttempt
from .layout import COMMITS_DIR
from .per_query_log import PerQueryLog

HINT = (
    "The commits log is the sink's idempotence record. Run `seo verify <table>` to see what is "
    "affected; `seo recover <table>` rebuilds lost records from the WAL and offsets log."
)


@dataclass(frozen=True)
class RewriteNote:
    """One rewrite a compaction batch published: the new file, its rows, the files it replaced."""

    final: str = dc_field(metadata=json_field("final", str))
    rows: int = dc_field(metadata=json_field("rows", int))
    replaced: tuple[str, ...] = dc_field(default=(), metadata=json_field("replaced", list, check=strings))


@dataclass(frozen=True, kw_only=True)
class CommitRecord(KeyedByAttempt):
    """One commits-log line; the fields are in the on-disk order (hence ``kw_only``: a field
    with a default, ``num_skipped_rows``, comes before required ones). The attempt that made
    it is one ``AttemptKey``, written inline (``batchId`` ... ``mode``)."""

    key: AttemptKey = dc_field(metadata=flattened(AttemptKey))
    num_files: int = dc_field(metadata=json_field("numFiles", int))
    num_rows: int | None = dc_field(metadata=json_field("numRows", int, optional=True))  # written as null
    num_bytes: int = dc_field(metadata=json_field("numBytes", int))
    num_skipped_rows: int = dc_field(default=0, metadata=json_field("numSkippedRows", int, optional=True))
    commit_time_ms: int = dc_field(metadata=json_field("commitTimeMs", int))
    step_ms: dict[str, float] = dc_field(default_factory=dict, metadata=json_field("stepMs", dict, optional=True))
    watermarks: dict[str, dict[str, Any]] = dc_field(default_factory=dict, metadata=json_field("watermarks", dict, optional=True))
    source_files: int = dc_field(default=0, metadata=json_field("sourceFiles", int, optional=True))
    #: written as ``epoch`` when None (a record made by the epoch that committed it)
    committed_by_epoch: int | None = dc_field(default=None, metadata=json_field("committedByEpoch", int, optional=True, fallback="epoch"))
    #: rows committed to the table up to and including this batch
    table_rows: int | None = dc_field(default=None, metadata=json_field("tableRows", int, optional=True, omit_default=True))
    #: Spark schema JSON of the rows written (partition columns included)
    schema: str | None = dc_field(default=None, metadata=json_field("schema", str, optional=True, omit_default=True))
    reconstructed: bool = dc_field(default=False, metadata=json_field("reconstructed", bool, optional=True, omit_default=True))
    #: dataset group root only: the state of every table of the group after this batch
    #: (``commit.group_state``), carried forward so that the newest record alone is the state
    datasets: dict[str, Any] | None = dc_field(default=None, metadata=json_field("datasets", dict, optional=True, omit_default=True))
    #: dataset group root only: per source partition, {"low": previous end, "high": this end}
    source_partitions: dict[str, Any] | None = dc_field(default=None, metadata=json_field("sourcePartitions", dict, optional=True, omit_default=True))
    #: ``format="delta"``: the Delta version of this batch's commit, when the writer knew it
    delta_version: int | None = dc_field(default=None, metadata=json_field("deltaVersion", int, optional=True, omit_default=True))
    #: ``format="iceberg"``: the id of the Iceberg snapshot holding this batch, when the writer knew it
    iceberg_snapshot: int | None = dc_field(default=None, metadata=json_field("icebergSnapshot", int, optional=True, omit_default=True))
    #: a compaction batch: the rewrites it published (module docstring)
    rewrites: list[RewriteNote] = dc_field(
        default_factory=list, metadata=json_field("rewrites", list, record=RewriteNote, optional=True, omit_default=True)
    )

    @classmethod
    def of(cls, key: AttemptKey, **rest: Any) -> CommitRecord:
        """The commit record of the attempt ``key``."""
        return cls(key=key, **rest)


class CommitCodec(DataclassCodec[CommitRecord]):
    def __init__(self) -> None:
        super().__init__(CommitRecord)


class CommitsLog(PerQueryLog[CommitRecord]):
    def __init__(self, storage: Storage, *, interval: int) -> None:
        super().__init__(storage, COMMITS_DIR, CommitCodec(), default_interval=interval, kind="commits log", hint=HINT)
