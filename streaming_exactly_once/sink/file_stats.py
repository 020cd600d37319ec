"""What the quality gates need of the files of a batch, counted while they are written.

Rows, null count per column, min/max per watermark column and failures per row check. A
dataset group's writer task (``sink.group_writer``) counts them per file as it writes and sends
them to the driver in the ``stats`` column of its ``mapInArrow`` result, one JSON object per
file (the row count travels in its own ``rows`` column)::

    {"nulls":{"id":0,"ts":2},"marks":{"ts":["2024-05-01 00:00:00","2024-05-01 23:59:59"]},"failed":{"amount >= 0":3}}

The driver (``sink.dataset_sink``) adds up the files of each table with the same ``merge``: one
definition of how statistics combine, on both sides. A task compares watermark values as Arrow
gives them and sends their JSON forms (``arrow_file_writer.json_value``); the driver compares
those. This JSON is an in-flight message between Spark tasks and the driver, never stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .arrow_file_writer import json_value

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class FileStats:
    rows: int = 0
    nulls: dict[str, int] = field(default_factory=dict)
    marks: dict[str, list[Any]] = field(default_factory=dict)  # column -> [min, max]
    failed: dict[str, int] = field(default_factory=dict)  # row check -> rows that failed it

    def merge(self, other: FileStats) -> None:
        self.rows += other.rows
        for name, count in other.nulls.items():
            self.nulls[name] = self.nulls.get(name, 0) + count
        for column, (lo, hi) in other.marks.items():
            old = self.marks.get(column)
            self.marks[column] = [lo, hi] if old is None else [min(old[0], lo), max(old[1], hi)]
        for check, count in other.failed.items():
            self.failed[check] = self.failed.get(check, 0) + count

    def add_rows(self, table: pa.Table, watermark_columns: tuple[str, ...], *, failed_checks_column: str, check_separator: str) -> None:
        """Count one Arrow chunk of a file's rows; ``failed_checks_column`` (if the chunk has it)
        names, joined by ``check_separator``, the row checks each row failed."""
        import pyarrow.compute as pc

        chunk = FileStats(rows=table.num_rows, nulls={name: table[name].null_count for name in table.column_names})
        for column in watermark_columns:
            if column not in table.column_names or table.num_rows == table[column].null_count:
                continue
            low_high = pc.min_max(table[column]).as_py()
            chunk.marks[column] = [low_high["min"], low_high["max"]]
        if failed_checks_column in table.column_names:
            names = pc.list_flatten(pc.split_pattern(table[failed_checks_column], check_separator))
            chunk.failed = {item["values"]: item["counts"] for item in pc.value_counts(names).to_pylist()}
        self.merge(chunk)

    def to_json(self) -> str:
        """The per-file message (module docstring); ``rows`` is sent beside it."""
        marks = {column: [json_value(lo), json_value(hi)] for column, (lo, hi) in self.marks.items()}
        return json.dumps({"nulls": self.nulls, "marks": marks, "failed": self.failed}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, *, rows: int) -> FileStats:
        obj = json.loads(text)
        return cls(rows=rows, nulls=dict(obj["nulls"]), marks={k: list(v) for k, v in obj["marks"].items()}, failed=dict(obj["failed"]))

    def watermarks(self) -> dict[str, dict[str, Any]]:
        """``{column: {"min": .., "max": ..}}``, the shape commit records and metrics use."""
        return {column: {"min": lo, "max": hi} for column, (lo, hi) in self.marks.items()}
