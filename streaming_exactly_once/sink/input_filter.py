"""Drop the rows of input files the table has already committed (recreated checkpoints).

When a checkpoint is lost or recreated, Spark's file source starts over and re-reads every file
in its input directory. Spark's own sink then silently *skips* the new query's batches (losing
new files); a plain ``foreachBatch`` append *duplicates* the old ones. The sink looks each input
file of the batch up in the table's sources log and filters out rows whose ``input_file_name()``
is a committed file, in the same pass as the write.

If rows cannot be attributed to a file (``input_file_name()`` is empty, e.g. after an
aggregation or a join), the batch fails with ``DuplicateInputError`` rather than risk a duplicate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, functions as F

from ..checkpoint.reader import InputFile
from ..errors import DuplicateInputError
from ..manifest.paths import normalize_uri
from .batch_metrics import BatchObservation

log = logging.getLogger("streaming_exactly_once.sink")


@dataclass(frozen=True)
class InputSplit:
    new: list[InputFile]
    already_committed: list[InputFile]


def split_inputs(inputs: list[InputFile], committed: set[str]) -> InputSplit:
    new: list[InputFile] = []
    old: list[InputFile] = []
    for item in inputs:
        (old if item.path in committed or normalize_uri(item.path) in committed else new).append(item)
    return InputSplit(new, old)


def drop_committed(df: DataFrame, already_committed: list[InputFile]) -> tuple[DataFrame, dict[str, Column]]:
    """``df`` without rows of those files, plus observe expressions that count what was dropped."""
    paths = sorted({f.path for f in already_committed} | {normalize_uri(f.path) for f in already_committed})
    source = F.input_file_name()
    tagged = df.withColumn("__seo_input_file", source)
    skip = F.col("__seo_input_file").isin(paths)
    unattributed = F.col("__seo_input_file") == F.lit("")
    metrics = {
        "skippedRows": F.sum(F.when(skip, 1).otherwise(0)),
        "unattributedRows": F.sum(F.when(unattributed, 1).otherwise(0)),
    }
    return tagged, metrics


def keep_new(tagged: DataFrame, already_committed: list[InputFile]) -> DataFrame:
    paths = sorted({f.path for f in already_committed} | {normalize_uri(f.path) for f in already_committed})
    return tagged.filter(~F.col("__seo_input_file").isin(paths)).drop("__seo_input_file")


class CommittedInputFilter:
    """A batch without the rows of input files the table committed before, and how many rows
    that dropped - known once the batch is written (Spark observes it in the writing pass)."""

    def __init__(self, df: DataFrame, inputs: list[InputFile], committed: set[str], *, batch_id: int, query_id: str) -> None:
        split = split_inputs(inputs, committed)
        self.new_inputs = split.new
        self.already_committed = split.already_committed
        self.batch_id = batch_id
        self.query_id = query_id
        self.df = df
        self._observation: BatchObservation | None = None
        self._skipped: int | None = None
        if split.already_committed:
            tagged, dedup_exprs = drop_committed(df, split.already_committed)
            self._observation = BatchObservation(())
            self.df = keep_new(self._observation.attach(tagged, extra=dedup_exprs), split.already_committed)

    def skipped_rows(self) -> int:
        """Rows of committed input files that were dropped; call it after the data is written,
        before the commit: rows that cannot be traced to a file fail the batch here."""
        if self._observation is None:
            return 0
        if self._skipped is not None:
            return self._skipped
        _, _, dedup = self._observation.result()
        if int(dedup.get("unattributedRows") or 0) > 0:
            raise DuplicateInputError(
                f"Batch {self.batch_id} of query {self.query_id} re-reads {len(self.already_committed)} input file(s) "
                "the table already committed (was the checkpoint recreated?), but its rows cannot be traced to input "
                "files (input_file_name() is empty after aggregations or joins). Nothing was published. Restore the "
                "old checkpoint, or move the committed files out of the input directory, then restart.",
                batch_id=self.batch_id,
            )
        self._skipped = int(dedup.get("skippedRows") or 0)
        log.warning(
            "batch %d of query %s: dropped %d row(s) of %d input file(s) committed earlier",
            self.batch_id, self.query_id, self._skipped, len(self.already_committed),
        )
        return self._skipped
