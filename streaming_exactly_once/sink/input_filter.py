"""Drop the rows of input files the table has already committed (recreated checkpoints).

When a checkpoint is lost or recreated, Spark's file source starts over and re-reads every file
in its input directory. Spark's own sink then silently *skips* the new query's batches (losing
new files); a plain ``foreachBatch`` append *duplicates* the old ones. The sink looks each input
file of the batch up in the table's sources log and filters out rows whose ``input_file_name()``
is a committed file, in the same pass as the write.

If rows cannot be attributed to a file (``input_file_name()`` is empty, e.g. after an
aggregation or a join), the batch fails with ``DuplicateInputError`` rather than risk a duplicate
- unless they carry a partitioned source's coordinates (a Kafka stream unioned with a file source:
the offset guard answers for those rows), or the batch's RDD lineage shows that every file row
keeps its name (``file_rows_keep_names``: only scans, narrow maps and unions), so the nameless
rows are another source's (a rate, socket or custom source in a union): they are
written as that source alone would have them written.
``BatchFilters`` pairs this filter with the offset guard (``sink.offset_guard``); ``reread_inputs``
names the input files Spark itself reads more than once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, functions as F

from ..checkpoint.reader import InputFile, SparkCheckpoint
from ..commit.writer import Writer
from ..errors import CheckpointRewoundError, DuplicateInputError
from ..manifest.paths import normalize_uri
from .batch_metrics import BatchObservation
from .offset_guard import OffsetGuard

log = logging.getLogger("streaming_exactly_once.sink")

#: The column that carries ``input_file_name()`` while the batch is filtered (dropped after).
INPUT_FILE_COLUMN = "__seo_input_file"


class CommittedInputFilter:
    """A batch without the rows of input files the table committed before, and how many rows
    that dropped - known once the batch is written (Spark observes it in the writing pass)."""

    def __init__(
        self,
        df: DataFrame,
        inputs: list[InputFile],
        committed: set[str],
        *,
        batch_id: int,
        query_id: str,
        attributed: Column | None = None,
        keeps_names: Callable[[], bool] = lambda: False,
    ) -> None:
        """``attributed``: true for a row another mechanism traces (a partitioned source's
        record, with its topic, partition and offset). ``keeps_names``: whether every file row of
        the batch keeps its input file's name (``file_rows_keep_names`` of the batch as Spark
        handed it over), asked only when the batch re-reads committed files."""
        self.new_inputs: list[InputFile] = []
        self.already_committed: list[InputFile] = []
        for item in inputs:
            seen = _holds(committed, item.path)
            (self.already_committed if seen else self.new_inputs).append(item)
        self.batch_id = batch_id
        self.query_id = query_id
        self.df = df
        self._observation: BatchObservation | None = None
        self._plan_keeps_names = False
        self._skipped: int | None = None
        if self.already_committed:
            paths = sorted({f.path for f in self.already_committed} | {normalize_uri(f.path) for f in self.already_committed})
            source = F.col(INPUT_FILE_COLUMN)
            skip = source.isin(paths)
            unattributed = source == F.lit("")
            if attributed is not None:
                unattributed = unattributed & ~F.coalesce(attributed, F.lit(False))
            counts = {
                "skippedRows": F.sum(F.when(skip, 1).otherwise(0)),
                "unattributedRows": F.sum(F.when(unattributed, 1).otherwise(0)),
            }
            self._plan_keeps_names = keeps_names()
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
        unattributed = int(dedup.get("unattributedRows") or 0)
        if unattributed > 0 and self._plan_keeps_names:
            log.info(
                "batch %d of query %s: %d row(s) without an input file come from a source of the union that is not a file source; they are written",
                self.batch_id,
                self.query_id,
                unattributed,
            )
        elif unattributed > 0:
            raise DuplicateInputError(
                f"Batch {self.batch_id} of query {self.query_id} re-reads {len(self.already_committed)} input file(s) "
                f"the table already committed (was the checkpoint recreated?), but {unattributed} of its rows cannot be "
                "traced to an input file or to Kafka-style offsets, and the batch's plan may lose input_file_name() for "
                "file rows (an aggregation, join or repartition before the sink, or a Spark Connect query, whose plan "
                "the sink cannot see), so the sink cannot tell re-read rows from new ones. Nothing was published. "
                "Restore the old checkpoint, or move the committed files out of the input directory, then restart.",
                batch_id=self.batch_id,
                unattributed_rows=unattributed,
            )
        self._skipped = int(dedup.get("skippedRows") or 0)
        log.warning(
            "batch %d of query %s: dropped %d row(s) of %d input file(s) committed earlier",
            self.batch_id,
            self.query_id,
            self._skipped,
            len(self.already_committed),
        )
        return self._skipped


#: The RDDs of a micro-batch that run each row in the task that read it, so a file row keeps its
#: ``input_file_name()``: the scans, narrow maps and unions. Any other (a shuffle of an
#: aggregation, a join or a repartition, a state store, a coalesce) may lose the name.
NAME_KEEPING_RDDS = frozenset({"SQLExecutionRDD", "MapPartitionsRDD", "UnionRDD", "FileScanRDD", "DataSourceRDD", "ParallelCollectionRDD"})


def file_rows_keep_names(df: DataFrame) -> bool:
    """Whether every file row of the batch ``df`` (as ``foreachBatch`` hands it over: a
    ``LogicalRDD`` over the batch's RDD) keeps its ``input_file_name()``: its RDD lineage holds
    only ``NAME_KEEPING_RDDS``. False when that cannot be told: a Spark Connect DataFrame (no JVM
    plan here), another plan, an RDD outside the list."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return False
    try:
        plan = jdf.queryExecution().analyzed()
        if plan.getClass().getSimpleName() != "LogicalRDD":
            return False
        lineage = str(plan.rdd().toDebugString())
    except Exception:  # the plan could not be read: the batch is refused as before
        return False
    names = re.findall(r"(\w+RDD)\[\d+\]", lineage)
    return bool(names) and all(n in NAME_KEEPING_RDDS for n in names)


#: Characters that make Hadoop take a path for a glob pattern (Spark's ``SparkHadoopUtil.isGlobPath``).
GLOB_CHARACTERS = frozenset("{}[]*?\\")


def reread_inputs(inputs: list[InputFile]) -> list[str]:
    """Input files of a batch whose paths Spark's file source takes for glob patterns, when the
    batch has enough files for that to make Spark read some of them more than once; else none.

    Measured on Spark 4.3 (plain ``foreachBatch``, no sink involved): with ``g`` files whose
    path contains any of ``{}[]*?\\`` among one source's files of a batch, the files directly
    in the input directory are read more than once - each of those ``g`` files ``g`` times,
    every other file ``g + 1`` times - consistent with Spark's ``checkAndGlobPathIfNecessary``
    returning the batch's whole path list for every path that looks like a glob when globbing is
    off. One such file alone in its batch is read once; files in subdirectories (partition
    directories, ``recursiveFileLookup``) were read once. The copies are identical rows of the
    same file, so the sink cannot remove them, and refusing the batch would fail every retry
    (Spark re-reads the same files): it names the files instead. The input directory is not
    known here, so files in subdirectories are named too.
    """
    by_source: dict[int, list[InputFile]] = {}
    for f in inputs:
        by_source.setdefault(f.source, []).append(f)
    out: list[str] = []
    for files in by_source.values():
        globby = [unquote(f.path) for f in files if GLOB_CHARACTERS & set(unquote(f.path))]
        if len(globby) > 1 or (globby and len(files) > 1):
            out += globby
    return out


@dataclass
class BatchFilters:
    """What a batch drops before it is written: rows of input files the table committed, and
    rows of partitioned sources below the table's offsets. ``taken_over``: input files of the
    query's earlier batches, recorded with this one (the table's first batch of the query);
    ``must_commit``: commit the batch even without rows (that first batch records the query)."""

    files: CommittedInputFilter
    offsets: OffsetGuard
    taken_over: list[InputFile] = field(default_factory=list)
    must_commit: bool = False

    @property
    def df(self) -> DataFrame:
        return self.files.df

    @property
    def new_inputs(self) -> list[InputFile]:
        """The input files the commit records: the batch's new ones, and those taken over."""
        return self.files.new_inputs + self.taken_over

    def skipped_rows(self) -> int:
        """Call it once the batch is written (the counts are observed in that pass)."""
        return self.files.skipped_rows() + self.offsets.skipped_rows()

    def drop_reasons(self) -> dict[str, int]:
        """The dropped rows by reason, for the batch's ledger (``commit.table_steps.ledger_step``); once written."""
        reasons = {"inputFileCommitted": self.files.skipped_rows(), "offsetBelowMark": self.offsets.skipped_rows()}
        return {reason: rows for reason, rows in reasons.items() if rows}


def warn_reread_inputs(inputs: list[InputFile], batch_id: int, query_id: str) -> None:
    """Say so when Spark will read some of the batch's input files more than once
    (``reread_inputs``): the copies are identical rows the sink cannot tell apart."""
    reread = reread_inputs(inputs)
    if reread:
        log.warning(
            "batch %d of query %s: input file(s) %s have glob characters ({}[]*?\\) in their paths. Spark's "
            "file source then reads the batch's files that lie directly in its input directory more than once "
            "(measured on Spark 4.3: with g such files, each of them g times, every other file g+1 times), so "
            "rows may be written twice; plain foreachBatch does the same and the copies cannot be told apart. "
            "Rename such files before they land in the input directory, or read with maxFilesPerTrigger=1.",
            batch_id,
            query_id,
            ", ".join(reread),
        )


def check_replay(writer: Writer, checkpoint: SparkCheckpoint, location: str, *, query_id: str, batch_id: int) -> None:
    """Before a batch the table committed is skipped as a replay: Spark's replay of a batch plans
    it as the table recorded it - the same source offsets, input files the table committed.
    Other offsets or an input file the table never committed mean the checkpoint at
    ``location`` was put back (an older copy restored, or its latest batches' files removed)
    and Spark re-plans the batch with other input. Skipping it would lose that input, so it is
    refused (``CheckpointRewoundError``) before anything is written."""
    inputs = checkpoint.input_files(batch_id) or []
    committed = writer.committed_input_paths() if inputs else set()
    retention = writer.options.source_retention_ms
    remembered_from = None if retention is None else int(time.time() * 1000) - retention  # older ones may be forgotten
    unknown = [f.path for f in inputs if not _holds(committed, f.path) and (remembered_from is None or f.timestamp >= remembered_from)]
    if unknown:
        shown = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        what = f"with {len(unknown)} input file(s) the table never committed: {shown}"
    else:
        planned_seq = checkpoint.offsets(batch_id)
        planned = None if planned_seq is None else tuple(planned_seq.offsets)
        recorded = writer.committed_offsets(query_id, batch_id) if planned is not None else None  # read only when needed
        if recorded is None or planned == recorded:
            return
        what = f"with the source offsets {list(planned or ())}, and the table committed it with {list(recorded)}"
    raise CheckpointRewoundError(
        f"Batch {batch_id} of query {query_id} is one the table committed, but the checkpoint {location} now plans it "
        f"{what}. The checkpoint was put back to an earlier "
        "state (an older copy restored, or its latest offsets, commits and sources files removed), so Spark re-plans "
        "batches the table already holds with other input; skipping this batch as a replay would lose it. Nothing "
        "was written. Restart the query with a new checkpoint location: the sink then drops the rows of the input "
        "files and the records of offsets the table holds and writes the others once (Kafka: from "
        "sink.starting_offsets())."
    )


def _holds(committed: set[str], path: str) -> bool:
    """Whether ``committed`` (the table's committed input files) holds ``path``, as Spark's source
    log spells it or normalized."""
    return path in committed or normalize_uri(path) in committed
