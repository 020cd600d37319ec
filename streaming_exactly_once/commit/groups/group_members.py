"""What a dataset group's writer knows of its tables (``commit.groups.group_committer`` commits them):
one table's part of a group batch, a table as the writer has it open, and the group's state
as its newest commit record holds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import LogCorruptError
from ...log.codec import RecordError
from ...storage.base import Storage
from ...table.commits_log import CommitRecord
from ...table.group_state import GroupState
from ...table.identity import TableIdentity
from ...table.layout import COMMITS_DIR
from ...table.table_logs import TableLogs
from ..protocol.attempt import StagedFile
from ..protocol.sequence import CommitSequence
from ..table_schema import TableSchema


@dataclass
class MemberBatch:
    """The files of one table in one group batch (``staged`` paths relative to the group root)."""

    table: str
    files: list[StagedFile]
    rows: int
    format: str
    partition_by: tuple[str, ...] = ()
    writer_options: dict[str, str] = field(default_factory=dict)
    watermarks: dict[str, dict[str, Any]] = field(default_factory=dict)
    schema: str | None = None
    #: "committed"; "rejected" (``table`` is then the quarantine table the batch went to);
    #: "quarantined" (a quarantine-rows table standing in for a dataset none of whose rows passed)
    status: str = "committed"
    #: ``format="delta"`` tables: the files are Parquet and the batch is also one Delta commit
    dataset: str | None = None  # the dataset the state entry is about (defaults to ``table``)
    checks: list[dict[str, Any]] = field(default_factory=list)
    quarantined_rows: int = 0
    #: no files, committed all the same: ``seo compact``'s batches of a table (the empty ones
    #: before its compaction batch, and that batch, which publishes only its rewrites)
    maintenance: bool = False


@dataclass
class Member:
    """A table of the group as this writer has it open: its logs, newest batch and row count."""

    logs: TableLogs
    latest: int
    table_rows: int
    identity: TableIdentity | None = None  # checked once per process, at the table's first batch
    schema: TableSchema | None = None  # loaded at the table's first schema check in this process


class CommitsView:
    """A group root has no manifest: a group batch is published once its commit record is
    there, written by the claim's own attempt."""

    def __init__(self, logs: TableLogs) -> None:
        self.commits = logs.commits

    def latest(self) -> int:
        newest = self.commits.latest_batch_id(refresh=True)
        return -1 if newest is None else newest

    def published(self, seq: CommitSequence) -> bool:
        record = self.commits.record(seq.batch_id)
        return record is not None and record.attempt == seq.attempt


def state_of(storage: Storage, newest: CommitRecord | None) -> GroupState:
    """The group state ``newest`` holds (empty without a record); ``LogCorruptError`` if damaged."""
    if newest is None:
        return GroupState()
    try:
        return GroupState.from_json(newest.datasets, newest.source_partitions)
    except RecordError as exc:
        raise LogCorruptError(
            path=storage.uri(COMMITS_DIR),
            batch_id=newest.batch_id,
            problem=f"the group state of the newest commit record is damaged: {exc}",
            hint="Restore the commits log from a backup; `seo verify` on the group shows what is affected.",
        ) from None


def table_formats(format: str) -> tuple[bool, bool, str]:
    """A member table's ``format``: whether it is a Delta table, an Iceberg table, and its files' format."""
    names = format.split("+")
    delta, iceberg = "delta" in names, "iceberg" in names
    return delta, iceberg, "parquet" if delta or iceberg else format


def tables_in(state: GroupState) -> list[str]:
    return state.table_names()


__all__ = ["CommitsView", "Member", "MemberBatch", "state_of", "table_formats", "tables_in"]
