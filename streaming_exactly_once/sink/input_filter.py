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

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, functions as F

from ..checkpoint.reader import InputFile
from ..manifest.paths import normalize_uri


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
