"""The sink's per-batch figures where Spark users look for them: query progress and listeners.

Two channels, because Spark offers no way for ``foreachBatch`` code to add numbers to a
``StreamingQueryProgress`` (``sink.metrics`` stays empty, and an ``observe`` on the batch
DataFrame inside ``foreachBatch`` never reaches the progress - both checked on PySpark 4.3,
classic and Spark Connect):

* With ``watermark_columns``, ``sink.start`` attaches ``observe(OBSERVATION, ...)`` to the
  *streaming* DataFrame, so every progress event carries
  ``observedMetrics["streaming_exactly_once"]``: the rows the sink read (``rows``) and min/max of
  each watermark column (``min:<col>``, ``max:<col>``). Any ``StreamingQueryListener``,
  ``query.lastProgress`` and tools reading progress JSON see them. Without watermark columns
  nothing is observed: the rows are Spark's own ``numInputRows``, and an observation in the
  plan costs about 3 % of each batch's write.
* What only exists after the commit - the table's batch id, files, bytes, commit time per step,
  rows dropped as already committed, whether the batch was a skipped replay - is in the table's
  commits log, keyed by (query id, Spark batch id) like the progress itself.
  ``SinkProgressListener(sink, on_batch)`` hands ``on_batch`` one dict per progress event of
  the sink's queries; ``batch_metrics`` does the lookup for a listener of your own. It reads the
  log, so it works the same under Spark Connect, where the sink runs in a server-side worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, functions as F
from pyspark.sql.streaming.listener import StreamingQueryListener

from ..commit.protocol.attempt import CommitResult
from ..commit.protocol.sequence import commit_ms
from ..storage import open_storage
from ..table.commits_log import CommitsLog
from ..table.identity import read_identity

log = logging.getLogger("streaming_exactly_once.sink")

OBSERVATION = "streaming_exactly_once"


def observe_stream(stream_df: DataFrame, watermark_columns: tuple[str, ...]) -> DataFrame:
    """``stream_df`` with the sink's observed metrics (see the module docstring)."""
    exprs = [F.count(F.lit(1)).alias("rows")]
    for column in watermark_columns:
        if column in stream_df.columns:
            exprs += [F.min(column).alias(f"min:{column}"), F.max(column).alias(f"max:{column}")]
    return stream_df.observe(OBSERVATION, *exprs)


def batch_metrics(table: str, query_id: str, spark_batch_id: int, *, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The sink's figures for Spark batch ``spark_batch_id`` of query ``query_id`` (what a
    progress event's ``id`` and ``batchId`` name), or None if the table holds no such batch
    (nothing to commit, or it failed).

    ``stepMs`` and ``commitMs`` come from the commit record, which is written at the same time
    as the offsets and sources records: they cover the commit up to that write, not those two
    records or the WAL delete (the sink's ``on_commit`` event has every step)."""
    storage = open_storage(table, storage_options)
    identity = read_identity(storage)
    commits = CommitsLog(storage, interval=identity.compact_interval if identity else 10)
    record = commits.find(str(query_id), int(spark_batch_id))
    if record is None:
        return None
    return {
        "table": storage.root_uri,
        "queryId": record.query_id,
        "sparkBatchId": record.spark_batch_id,
        "batchId": record.batch_id,
        "numRows": record.num_rows,
        "numFiles": record.num_files,
        "numBytes": record.num_bytes,
        "numSkippedRows": record.num_skipped_rows,
        "commitTimeMs": record.commit_time_ms,
        "stepMs": dict(record.step_ms),
        "commitMs": commit_ms(record.step_ms),
        "watermarks": dict(record.watermarks),
        "epoch": record.epoch,
    }


class SinkProgressListener(StreamingQueryListener):
    """Calls ``on_batch(metrics)`` for every progress event of a query writing ``sink``'s table.

    ``metrics`` is ``batch_metrics`` of the event's batch plus ``"observed"`` (this sink's
    observed metrics from the progress) and ``"status"``: ``committed`` (this run committed it),
    ``replayed`` (committed by an earlier run: Spark replayed it and the sink skipped it) or
    ``nothing`` (no data, or nothing committed). Register it with ``spark.streams.addListener``.
    """

    def __init__(self, sink: Any, on_batch: Callable[[dict[str, Any]], None]) -> None:
        self.table = sink.table
        self.storage_options = dict(sink.options.storage_options)
        self.on_batch = on_batch

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        try:
            metrics = batch_metrics(self.table, str(progress.id), int(progress.batchId), storage_options=self.storage_options)
        except Exception:  # a listener must never break Spark's listener bus
            log.exception("reading the sink's metrics of batch %s failed", progress.batchId)
            return
        observed = _observed(progress)
        if metrics is None:
            out: dict[str, Any] = {"queryId": str(progress.id), "sparkBatchId": int(progress.batchId), "status": "nothing"}
        else:
            started = _epoch_ms(progress.timestamp)
            fresh = started is None or metrics["commitTimeMs"] >= started
            out = {**metrics, "status": "committed" if fresh else "replayed"}
        out["observed"] = observed
        self.on_batch(out)


def _observed(progress: Any) -> dict[str, Any]:
    """The sink's observed metrics of a progress event; without an observation (no watermark
    columns), the rows Spark counted into the query."""
    row = (progress.observedMetrics or {}).get(OBSERVATION)
    if row is None:
        rows = getattr(progress, "numInputRows", None)
        return {} if rows is None else {"rows": int(rows)}
    return row.asDict() if hasattr(row, "asDict") else dict(row)


def _epoch_ms(timestamp: str | None) -> int | None:
    """Progress timestamps are ISO-8601 UTC (``2026-11-22T19:41:03.123Z``)."""
    if not timestamp:
        return None
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def batch_committed_event(result: CommitResult, table: str, details: Mapping[str, Any]) -> dict[str, Any]:
    """The ``batch_committed`` event of a committed batch (``on_commit``'s argument), also logged."""
    record = result.record
    assert record is not None
    event = {
        "event": "batch_committed",
        "table": table,
        "batchId": result.batch_id,
        "queryId": result.query_id,
        "sparkBatchId": result.spark_batch_id,
        "epoch": record.epoch,
        "mode": record.mode,
        "numRows": record.num_rows,
        "numFiles": record.num_files,
        "numBytes": record.num_bytes,
        **details,
        "stepMs": result.timings,
        "commitMs": commit_ms(result.timings),
    }
    log.info(
        "committed batch %s (query batch %s): %s rows, %s files, commit %.1f ms",
        result.batch_id,
        result.spark_batch_id,
        record.num_rows,
        record.num_files,
        event["commitMs"],
    )
    return event
