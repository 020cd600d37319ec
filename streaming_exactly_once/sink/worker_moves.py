"""Very large move lists of a commit run on the cluster's workers (``StepContext.distribute``)."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from ..commit.protocol.steps import FileMove
from ..commit.writer import Writer
from ..storage.base import Storage
from .query_identity import is_connect


def distribute_moves(committer: Writer, storage: Storage, df: DataFrame) -> None:
    """Let ``committer`` run very large move lists on the workers of ``df``'s Spark (once)."""
    if committer.distribute is not None or is_connect(df):
        return  # Spark Connect has no SparkContext: the driver's threads move
    if not storage.usable_on_executors:
        return  # e.g. hdfs:// through the driver's JVM: workers cannot use it
    try:
        sc = df.sparkSession.sparkContext
    except Exception:
        return

    def distribute(fn: Callable[[Storage, list[FileMove]], None], items: list[FileMove]) -> None:
        slices = max(1, min(len(items) // 500 + 1, sc.defaultParallelism * 4))
        sc.parallelize(items, slices).foreachPartition(lambda part: fn(storage, list(part)))

    committer.distribute = distribute
