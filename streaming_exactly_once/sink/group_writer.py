"""One pass per output: route every row to its table, partition directory or quarantine, and count.

Each Spark task receives Arrow batches (``mapInArrow``) of one output's rows, with a column
``__seo_failed`` naming the row checks the row failed (empty if none). It writes

* good rows to ``<staging>/data/<table>/<k=v>/part-<task>-<uuid>.<ext>``, where ``<table>`` is
  the output's name plus the row's dataset value (``outputs.Output.table_for``);
* failed rows - and rows whose dataset value is NULL - to
  ``<staging>/data/_quarantine/rows/<table>/part-...`` with a ``_seo_failed_checks`` column;
* rows that need a directory name longer than a filesystem allows (``outputs.NAME_MAX_BYTES``:
  a dataset value, or a partition's ``k=v``) to quarantine as well, with the built-in check
  they failed (``DATASET_NAME_CHECK``, ``PARTITION_NAME_CHECK``). Writing them would fail the
  batch on every retry - one such row would stop the query for good;

and returns one row per file: where it goes, its size, and what the quality gates need without
another scan - rows, null counts per column, min/max of the watermark columns, failures per
row check. The commit then renames each staged file to ``<table>/<same relative path>``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..manifest.paths import partition_dir
from ..storage.base import Storage
from ..table.group_state import QUARANTINE_ROWS
from .arrow_file_writer import EXTENSIONS, FileSink, PendingRows, ResultFields, partition_text, result_batch, split_by
from .file_stats import FileStats
from .outputs import NAME_MAX_BYTES, Output, dataset_fits, fits_in_name
from .schema_fit import conform_arrow

if TYPE_CHECKING:  # imported where used: a task imports pyarrow only when it writes
    from collections.abc import Iterator, Mapping

    import pyarrow as pa

FAILED = "__seo_failed"
FAILED_CHECKS = "_seo_failed_checks"
CHECK_SEPARATOR = "; "
NULL_DATASET_CHECK = "dataset value is not null"
DATASET_NAME_CHECK = f"dataset directory name <= {NAME_MAX_BYTES} bytes"
PARTITION_NAME_CHECK = f"partition directory name <= {NAME_MAX_BYTES} bytes"
#: Row checks the writer applies by itself (never configured, never mandatory).
BUILTIN_ROW_CHECKS = (NULL_DATASET_CHECK, DATASET_NAME_CHECK, PARTITION_NAME_CHECK)
RESULT_FIELDS: ResultFields = (
    ("table", "string"),
    ("rel", "string"),
    ("staged", "string"),
    ("size", "long"),
    ("mtime", "long"),
    ("rows", "long"),
    ("kind", "string"),
    ("stats", "string"),
)


@dataclass(frozen=True)
class GroupTaskWriter:
    """What ``mapInArrow`` runs in each task for one output (configuration only: it is pickled
    to the workers); each call routes one task's rows through a fresh ``_TaskFiles``."""

    storage: Storage
    staging: str
    output: Output
    format: str
    partition_by: tuple[str, ...]
    options: Mapping[str, str]
    watermark_columns: tuple[str, ...]
    has_failed_column: bool
    #: Spark schema JSON per table whose rows must be conformed to its schema (cast up, nulls for
    #: a missing nullable column, the table's order: ``sink.schema_fit``)
    conform: Mapping[str, str] = field(default_factory=dict)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        task_files = _TaskFiles(self, task=context.partitionId() if context is not None else 0)
        for batch in batches:
            if batch.num_rows:
                task_files.route(pa.Table.from_batches([batch]))
        if task_files.open_files:
            yield result_batch(RESULT_FIELDS, task_files.close())


class _TaskFiles:
    """The files one task writes for one output: one per (table, partition directory)."""

    def __init__(self, writer: GroupTaskWriter, *, task: int) -> None:
        self.writer = writer
        self.task = task
        self.extension = EXTENSIONS[writer.format]
        self.open_files: dict[tuple[str, str], tuple[FileSink, FileStats, str, str]] = {}
        self.pending = PendingRows()  # what all the task's open files hold unwritten, bounded together
        self.failed_type: pa.DataType | None = None  # of the failed-checks column, once a batch is seen

    def route(self, table: pa.Table) -> None:
        """Send each row of a batch to its table, partition or quarantine."""
        import pyarrow as pa
        import pyarrow.compute as pc

        w = self.writer
        self.failed_type = table.schema.field(FAILED).type if w.has_failed_column else pa.string()
        if w.has_failed_column:
            failed = table[FAILED]
            bad_mask = pc.and_(pc.is_valid(failed), pc.not_equal(failed, ""))
            good = table.filter(pc.invert(bad_mask)).drop_columns([FAILED])
            bad = table.filter(bad_mask)
            bad = bad.rename_columns([FAILED_CHECKS if c == FAILED else c for c in bad.column_names])
        else:
            good, bad = table, None
        column = w.output.dataset_column
        if column is None:
            if good.num_rows:
                self.write_good(w.output.name, good)
            if bad is not None and bad.num_rows:
                self.write_bad(w.output.name, bad)
            return
        for key, part in split_by(good, (column,)):
            dataset = partition_text(key[column])
            if dataset is None:  # no dataset to land in: quarantined, never dropped
                self.write_bad(w.output.table_for(None), self.with_reason(part, NULL_DATASET_CHECK))
            elif not dataset_fits(dataset):  # no directory can hold it
                self.write_bad(w.output.table_for(dataset), self.with_reason(part, DATASET_NAME_CHECK))
            else:
                self.write_good(w.output.table_for(dataset), part)
        if bad is not None and bad.num_rows:
            for key, part in split_by(bad, (column,)):
                dataset = partition_text(key[column])
                if dataset is None:
                    part = self.with_reason(part, NULL_DATASET_CHECK)
                elif not dataset_fits(dataset):
                    part = self.with_reason(part, DATASET_NAME_CHECK)
                self.write_bad(w.output.table_for(dataset), part)

    def write_good(self, table_path: str, rows: pa.Table) -> None:
        """Rows that passed every check; ``rows`` still has the dataset column (if any)."""
        partition_by, column = self.writer.partition_by, self.writer.output.dataset_column
        for key, part in split_by(rows, partition_by):
            directory = partition_dir([(c, partition_text(key[c])) for c in partition_by])
            if all(fits_in_name(component) for component in directory.split("/")):
                self.write(table_path, directory, part.drop_columns([column]) if column else part, "data")
            else:
                self.write_bad(table_path, self.with_reason(part, PARTITION_NAME_CHECK))

    def write_bad(self, table_path: str, rows: pa.Table) -> None:
        """Rows for quarantine; one file may get rows of several kinds (failed a row check,
        NULL dataset, name too long), so their ``_seo_failed_checks`` is always nullable."""
        i = rows.schema.get_field_index(FAILED_CHECKS)
        if i >= 0 and not rows.schema.field(i).nullable:
            rows = rows.cast(rows.schema.set(i, rows.schema.field(i).with_nullable(True)))
        self.write(f"{QUARANTINE_ROWS}/{table_path}", "", rows, "quarantine")

    def with_reason(self, rows: pa.Table, reason: str) -> pa.Table:
        """``rows`` with ``reason`` added to (or as) their ``_seo_failed_checks``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if FAILED_CHECKS in rows.column_names:
            i = rows.column_names.index(FAILED_CHECKS)
            column = rows[FAILED_CHECKS]
            joined = pc.binary_join_element_wise(column, pa.scalar(reason, column.type), pa.scalar(CHECK_SEPARATOR, column.type))
            return rows.set_column(i, FAILED_CHECKS, joined)
        return rows.append_column(FAILED_CHECKS, pa.array([reason] * rows.num_rows, self.failed_type))

    def write(self, table_path: str, directory: str, part: pa.Table, kind: str) -> None:
        w = self.writer
        key = (table_path, directory)
        data = part.drop_columns([c for c in w.partition_by if c in part.column_names]) if kind == "data" else part
        if kind == "data" and table_path in w.conform:
            data = conform_arrow(data, w.conform[table_path], leave_out=w.partition_by)
        if key not in self.open_files:
            name = f"part-{self.task:05d}-{uuid.uuid4()}{self.extension}"
            rel = f"{directory}/{name}" if directory else name
            staged = f"{w.staging}/data/{table_path}/{rel}"
            self.open_files[key] = (FileSink(w.storage, staged, w.format, data.schema, w.options, pending=self.pending), FileStats(), rel, kind)
        sink, stats, _, _ = self.open_files[key]
        stats.add_rows(part, w.watermark_columns, failed_checks_column=FAILED_CHECKS, check_separator=CHECK_SEPARATOR)
        sink.write(data)

    def close(self) -> dict[str, list[Any]]:
        """Close every file; one result row per file (see ``RESULT_FIELDS``)."""
        out: dict[str, list[Any]] = {name: [] for name, _ in RESULT_FIELDS}
        for (table_path, _), (sink, stats, rel, kind) in self.open_files.items():
            sink.close()
            info = self.writer.storage.info(sink.final)
            for name, value in (
                ("table", table_path),
                ("rel", rel),
                ("staged", sink.final),
                ("size", info.size),
                ("mtime", info.mtime_ms),
                ("rows", stats.rows),
                ("kind", kind),
                ("stats", stats.to_json()),
            ):
                out[name].append(value)
        return out
