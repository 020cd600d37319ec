"""Which streaming query is calling ``foreachBatch``, and where its checkpoint is.

The idempotence key is (query id, batch id). Spark puts the persistent query id - the ``id`` in
``<checkpoint>/metadata``, new whenever the checkpoint is new - into the local property
``sql.streaming.queryId`` of the thread that runs the batch. The checkpoint location is given to
``ExactlyOnceSink.start``, passed as ``checkpoint_location=``, or looked up among the active
queries of the session; without it the sink still works but cannot record source offsets or
input files (and so cannot protect a recreated checkpoint from re-reading committed files).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import IdentityError

log = logging.getLogger("streaming_exactly_once.sink")

QUERY_ID_PROPERTY = "sql.streaming.queryId"


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


def resolve_identity(df, *, query_id: str | None, checkpoint: str | None) -> QueryIdentity:
    """The calling query's id and checkpoint (explicit values win)."""
    qid = query_id
    if qid is None:
        qid = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    if not qid:
        raise IdentityError(
            "ExactlyOnceSink was called outside a streaming query's foreachBatch (no query id). "
            "Use it as writeStream.foreachBatch(sink) or sink.start(df), or pass query_id= explicitly."
        )
    return QueryIdentity(query_id=qid, checkpoint=checkpoint or _active_checkpoint(qid))
