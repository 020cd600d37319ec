"""Which source partition a data file's rows come from, and their offsets, from its Parquet footer.

A batch of a partitioned source (Kafka) carries each record's coordinate - topic, partition,
offset - as columns, and the sink writes them into the data files. A Parquet footer holds, per
row group, the lowest and highest value and the count of nulls of each column, so a file whose
rows all come from one partition says, without a read of its data, how many records of that
partition it holds and the span of their offsets (the ledger's ``rows``/``rowOffsets``). A Kafka
offset holds one record, so more rows than offsets in their span are records there twice - or
one record made into several rows (an explode that keeps the offset): recorded for whoever
reads the ledger, not judged by the audit alone.

A file mixing partitions, without the columns (a ``partitionBy`` column is read from the file's
directory, ``name=value``), or not Parquet says nothing: its rows are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote


@dataclass(frozen=True)
class PartitionRows:
    """The records of one source partition (``topic/partition``) in a batch's files: how many,
    and the span ``[low, high)`` their offsets lie in."""

    partition: str
    rows: int
    low: int
    high: int

    def merged(self, other: PartitionRows) -> PartitionRows:
        return PartitionRows(self.partition, self.rows + other.rows, min(self.low, other.low), max(self.high, other.high))


def _directory_values(path: str) -> dict[str, str]:
    return {k: unquote(v) for k, _, v in (seg.partition("=") for seg in path.split("/")[:-1] if "=" in seg)}


def _column_span(metadata: Any, index: int) -> tuple[Any, Any] | None:
    """(lowest, highest) of a column over every row group; None if a group has nulls or no statistics."""
    low = high = None
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if group.num_rows == 0:
            continue
        stats = group.column(index).statistics
        if stats is None or not stats.has_min_max or stats.null_count is None or stats.null_count > 0:
            return None
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    return None if low is None else (low, high)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def file_partition_rows(metadata: Any, path: str, columns: Sequence[str]) -> PartitionRows | None:
    """The records of the one source partition whose rows the Parquet file at (table-relative)
    ``path`` holds, from its footer ``metadata``; None when the footer cannot say (see module)."""
    if metadata is None or metadata.num_rows == 0 or len(columns) != 3:
        return None
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    directory = _directory_values(path)
    spans: list[tuple[Any, Any]] = []
    for column in columns:
        if column in names:
            span = _column_span(metadata, names.index(column))
        elif column in directory:
            span = (directory[column], directory[column])
        else:
            span = None
        if span is None:
            return None
        spans.append(span)
    (topic_lo, topic_hi), (part_lo, part_hi), (low, high) = spans
    if topic_lo != topic_hi or part_lo != part_hi or isinstance(low, (str, bytes)) or isinstance(high, (str, bytes)):
        return None
    try:
        return PartitionRows(f"{_text(topic_lo)}/{int(part_lo)}", int(metadata.num_rows), int(low), int(high) + 1)
    except (TypeError, ValueError):
        return None


def batch_partition_rows(found: Iterable[PartitionRows | None]) -> dict[str, PartitionRows]:
    """The files' records merged per partition."""
    out: dict[str, PartitionRows] = {}
    for rows in found:
        if rows is not None:
            out[rows.partition] = out[rows.partition].merged(rows) if rows.partition in out else rows
    return out
