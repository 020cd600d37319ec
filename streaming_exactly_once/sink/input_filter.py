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

from pyspark.sql import DataFrame, functions as F

from ..checkpoint.reader import InputFile
from ..errors import DuplicateInputError
from ..manifest.paths import normalize_uri
from .batch_metrics import BatchObservation

log = logging.getLogger("streaming_exactly_once.sink")

#: The column that carries ``input_file_name()`` while the batch is filtered (dropped after).
INPUT_FILE_COLUMN = "__seo_input_file"


class CommittedInputFilter:
    """A batch without the rows of input files the table committed before, and how many rows
    that dropped - known once the batch is written (Spark observes it in the writing pass)."""

    def __init__(self, df: DataFrame, inputs: list[InputFile], committed: set[str], *, batch_id: int, query_id: str) -> None:
        self.new_inputs: list[InputFile] = []
        self.already_committed: list[InputFile] = []
        for item in inputs:
            seen = item.path in committed or normalize_uri(item.path) in committed
            (self.already_committed if seen else self.new_inputs).append(item)
        self.batch_id = batch_id
        self.query_id = query_id
        self.df = df
        self._observation: BatchObservation | None = None
        self._skipped: int | None = None
        if self.already_committed:
            paths = sorted({f.path for f in self.already_committed} | {normalize_uri(f.path) for f in self.already_committed})
            source = F.col(INPUT_FILE_COLUMN)
            skip = source.isin(paths)
            counts = {
                "skippedRows": F.sum(F.when(skip, 1).otherwise(0)),
                "unattributedRows": F.sum(F.when(source == F.lit(""), 1).otherwise(0)),
            }
            self._observation = BatchObservation(())
            tagged = df.withColumn(INPUT_FILE_COLUMN, F.input_file_name())
            self.df = self._observation.attach(tagged, extra=counts).filter(~skip).drop(INPUT_FILE_COLUMN)

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
