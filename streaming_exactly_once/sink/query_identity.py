"""Which streaming query is calling ``foreachBatch``, and where its checkpoint is.

The idempotence key is (query id, batch id). The query id is the persistent ``id`` in
``<checkpoint>/metadata`` - new whenever the checkpoint is new. Classic Spark also puts it into
the local property ``sql.streaming.queryId`` of the thread that runs the batch. Under Spark
Connect there is no SparkContext in the ``foreachBatch`` worker, so the id is read from the
checkpoint's ``metadata`` file, which Spark writes before the first batch runs.

The checkpoint location is given to ``ExactlyOnceSink.start``, passed as
``checkpoint_location=``, or (classic only) looked up among the active queries of the session;
without it the sink still works in classic Spark but cannot record source offsets or input
files (and so cannot protect a recreated checkpoint from re-reading committed files); under
Spark Connect it is required.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame

from ..errors import IdentityError

log = logging.getLogger("streaming_exactly_once.sink")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: Spark runs a query's batches in a job group named by the run's id: a new run of the same query
#: (same checkpoint) gets a new one.
JOB_GROUP_PROPERTY = "spark.jobGroup.id"


@dataclass(frozen=True)
class QueryIdentity:
    query_id: str
    checkpoint: str | None


def _active_checkpoint(query_id: str) -> str | None:
    try:
        from pyspark.sql import SparkSession

        sessions = [SparkSession._instantiatedSession, SparkSession.getActiveSession()]
        for session in sessions:
            if session is None:
                continue
            for query in session.streams.active:
                if query.id == query_id:
                    return str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    except Exception:  # internal API: degrade to "unknown" rather than fail the batch
        log.debug("could not look up the checkpoint of query %s", query_id, exc_info=True)
    return None


def is_connect(obj: object) -> bool:
    """Whether a DataFrame or SparkSession is Spark Connect's (vs classic py4j PySpark)."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def local_query_id(df: DataFrame) -> str | None:
    """Classic Spark: the query id Spark set on the thread running the batch (None under Connect)."""
    if is_connect(df):
        return None
    return df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or None


def local_run_marker(df: DataFrame) -> str | None:
    """Classic Spark: a value that changes when a new run of the query calls the batch - the job
    group Spark runs the batch in, named by the run's id (None under Connect)."""
    if is_connect(df):
        return None
    return df.sparkSession.sparkContext.getLocalProperty(JOB_GROUP_PROPERTY) or None


def resolve_identity(df: DataFrame, *, query_id: str | None, checkpoint: str | None, checkpoint_query_id: Callable[[str], str]) -> QueryIdentity:
    """The calling query's id and checkpoint (explicit values win).

    ``checkpoint_query_id(location)`` reads the id from ``<location>/metadata``."""
    qid = query_id or local_query_id(df)
    if qid is None and is_connect(df):
        if checkpoint is None:
            raise IdentityError(
                "Under Spark Connect the sink learns the query's id from its checkpoint, and this sink was "
                "not told where that is. Start the query with sink.start(df, checkpoint_location=...), or "
                "build the sink with checkpoint_location= (the same location the query uses)."
            )
        qid = checkpoint_query_id(checkpoint)
    if not qid:
        raise IdentityError(
            "ExactlyOnceSink was called outside a streaming query's foreachBatch (no query id). "
            "Use it as writeStream.foreachBatch(sink) or sink.start(df), or pass query_id= explicitly."
        )
    if checkpoint is None and not is_connect(df):  # looked up under Spark's own id, also when another was given
        checkpoint = _active_checkpoint(local_query_id(df) or qid)
    return QueryIdentity(query_id=qid, checkpoint=checkpoint)
