"""One attempt at a batch - what it stages, claims and commits - and what a commit returns."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...checkpoint.reader import InputFile
from ...table.attempt_key import AttemptKey, KeyedByAttempt
from ...table.commits_log import CommitRecord
from ...table.offsets_log import OffsetsRecord
from ...table.sources_log import SourceFileRecord
from ..table_steps.ledger_step import LedgerInputs, StagedRead
from .sequence import CommitSequence
from .step import CommitStep
from .steps import WriteOffsets, WriteSources


def elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


@dataclass(frozen=True)
class StagedFile:
    """A data file of the batch: ``final`` relative to the table root; ``staged`` in rename mode."""

    final: str
    size: int
    mtime_ms: int
    staged: str | None = None
    #: rows in the file, where the writer knows them (``direct`` mode's tasks count them)
    rows: int | None = None
    #: the staged file as the writer read it, its bytes synced in that open (``ledger_step.read_file``):
    #: the commit neither syncs its bytes again nor reads it for its ledger
    read: StagedRead | None = field(default=None, compare=False, repr=False)


@dataclass
class BatchAttempt(KeyedByAttempt):
    """One attempt at committing a batch, from ``begin`` until its commit or abort."""

    #: which batch it claims, for which (query, Spark batch), in which epoch, token and mode
    key: AttemptKey
    staging_dir: str
    #: the offsets record the commit will write (the key's batch, source offsets)
    offsets: OffsetsRecord
    timings: dict[str, float] = field(default_factory=dict)
    #: what the sink knows of the batch for its ledger beyond its files (``commit.table_steps.ledger_step``)
    ledger: LedgerInputs = field(default_factory=LedgerInputs)

    def record(self, batch_id: int, *, epoch: int, files: Sequence[StagedFile], num_rows: int | None, now_ms: int, **extra: Any) -> CommitRecord:
        """The commit record of ``files`` as batch ``batch_id`` of this attempt."""
        return CommitRecord.of(
            replace(self.key, batch_id=batch_id, epoch=epoch),
            num_files=len(files),
            num_rows=num_rows,
            num_bytes=sum(f.size for f in files),
            commit_time_ms=now_ms,
            **extra,
        )

    def sequence(self, steps: list[CommitStep], *, epoch: int, now_ms: int) -> CommitSequence:
        return CommitSequence(key=replace(self.key, epoch=epoch), staging_dir=self.staging_dir, created_ms=now_ms, steps=steps)

    def format_info(self, *, group: bool = False) -> dict[str, str]:
        """What a table format's commit of this attempt records of it (a Delta ``commitInfo``,
        an Iceberg snapshot summary): the query and Spark batch, and a group's batch."""
        info = {"queryId": self.query_id, "sparkBatchId": str(self.spark_batch_id)}
        return {**info, "groupBatchId": str(self.batch_id)} if group else info

    def offsets_step(self, batch_id: int) -> WriteOffsets:
        """The offsets record as batch ``batch_id`` (a reset made at the attempt's batch moves with it)."""
        begun = self.offsets.batch_id
        resets = {name: batch_id if batch == begun else batch for name, batch in self.offsets.offset_resets.items()}
        return WriteOffsets(record=replace(self.offsets, batch_id=batch_id, offset_resets=resets))


@dataclass(frozen=True)
class CommitResult:
    query_id: str
    spark_batch_id: int
    status: str  # "committed" | "duplicate" | "empty"
    batch_id: int | None = None
    record: CommitRecord | None = None
    timings: dict[str, float] = field(default_factory=dict)


def sources_step(batch_id: int, input_files: Sequence[InputFile]) -> WriteSources:
    return WriteSources(
        batch_id=batch_id,
        files=[SourceFileRecord(batch_id=batch_id, source=i.source, path=i.path, timestamp=i.timestamp) for i in input_files],
    )
