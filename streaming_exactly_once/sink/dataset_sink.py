"""``DatasetSink``: one streaming query into many tables, one all-or-nothing commit per batch.

::

    sink = DatasetSink("file:///lake", dataset_column="topic", partition_by=["day"],
                       watermark_columns=["ts"], checks=[Check.row("amount >= 0"), Check.rows_between(1, None)],
                       policy="partial")
    sink.start(stream_df, checkpoint_location="file:///chk/lake")
    sink.watermarks()          # per table: low / high / batch min-max, expected high from the source

Per batch (the Gobblin model - datasets, watermarks, forks, quality gates, commit policy - on
Spark's micro-batches)::

    (query, batch) committed? --yes--> skip
      | no
    intent _seo/offsets/G
    for each output (a fork; the batch is persisted when there are several):
        transform -> row checks as a column -> one mapInArrow pass writes every row to its
        table / partition / quarantine under _seo/staging/G-<attempt>/ and returns per-file stats
    batch checks per table, from those stats (rows, null counts, schema, min/max, predicates), and
        each table's own schema (commit.table_schema: rows are cast/filled to it in the pass that
        writes them; a table they do not fit fails its "table schema" check)
    policy: full    - any mandatory failure: nothing published, rejection record, BatchRejectedError
                      (SchemaMismatchError when a table's schema was the failure)
            partial - a failed table's batch goes to _quarantine/batches/<table>; the rest publish
    group commit (commit.groups.group_committer): WAL -> moves -> each table's manifest + commit record
        -> sources -> group commit record with every table's state (absent tables carried over)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, Row, functions as F

from ..checkpoint.offset_seq import OffsetSeq
from ..commit.committer import BatchAttempt, CommitResult, StagedFile
from ..commit.groups.group_committer import GroupCommitter, MemberBatch, tables_in
from ..delta.target import DeltaSettings
from ..errors import BatchRejectedError, ConfigError, SchemaMismatchError
from ..iceberg.settings import IcebergSettings
from ..table.group_state import QUARANTINE_BATCHES, QUARANTINE_ROWS, GroupState, expected_by_dataset, is_quarantine
from ..table.rejections import read_rejections, write_rejection
from ..table.schema_rules import Verdict
from ..table.source_offsets import source_partitions
from .arrow_file_writer import check_partition_types, result_ddl
from .batch_sink import BatchSink, log
from .checks import Check, CheckResult, batch_checks, mandatory_failures, row_checks
from .file_stats import FileStats
from .group_writer import BUILTIN_ROW_CHECKS, CHECK_SEPARATOR, FAILED, FAILED_CHECKS, RESULT_FIELDS, GroupTaskWriter
from .input_filter import BatchFilters
from .keywords import GroupKeywords, check_keywords, document
from .options import COMPACTED_FORMATS, DIRECT_FORMATS, GroupOptions, SinkOptions, check_evolving_format, table_formats
from .outputs import Output

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: The batch check a table's rows fail when they do not fit its schema (``commit.table_schema``).
SCHEMA_CHECK = "table schema"


def _tables_of(output: Output, tables: list[str]) -> list[str]:
    """The existing tables of ``tables`` that ``output`` writes (quarantine tables are none)."""
    if output.dataset_column is None:
        return [t for t in tables if t == output.name]
    prefix = f"{output.name}/" if output.name else ""
    return [t for t in tables if t.startswith(prefix) and "/" not in t[len(prefix) :] and not is_quarantine(t)]


@dataclass
class _TableFiles:
    """What one output wrote for one table in this batch (aggregated from per-file stats)."""

    table: str
    output: Output
    kind: str  # "data" | "quarantine"
    schema: str
    fields: dict[str, str]
    files: list[StagedFile] = field(default_factory=list)
    stats: FileStats = field(default_factory=FileStats)

    def add(self, row: Row) -> None:
        self.files.append(StagedFile(final=row["rel"], size=row["size"], mtime_ms=row["mtime"], staged=row["staged"]))
        self.stats.merge(FileStats.from_json(row["stats"], rows=row["rows"]))

    def metrics(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": self.stats.rows,
            "files": len(self.files),
            "nulls": dict(self.stats.nulls),
            "fields": dict(self.fields),
            "watermarks": self.stats.watermarks(),
        }


class DatasetSink(BatchSink[GroupCommitter]):
    """Several tables from one query, committed together; see the module docstring.

    Takes every option of ``ExactlyOnceSink`` (they apply to each table; ``staging_mode`` can
    only be ``rename`` and ``spark_manifest`` only true), plus the group's own:

    Args:
        root: URI or path of the group's root; its tables are directories below it.
    """

    def __init__(self, root: str, **options: Unpack[GroupKeywords]) -> None:
        check_keywords(options, GroupKeywords, "DatasetSink")
        sink_options = SinkOptions.build(options)
        self.group = GroupOptions.build(options)
        self.outputs = self.group.resolved_outputs()
        formats = {f for o in self.outputs for f in table_formats(o.format or sink_options.format)}
        if sink_options.iceberg_catalog is not None:
            raise ConfigError(
                "a DatasetSink's Iceberg tables are recorded by their own metadata files (found by path, one table per "
                "directory); iceberg_catalog is an ExactlyOnceSink option",
                key="iceberg_catalog",
            )
        if sink_options.adopt_existing_files:
            raise ConfigError(
                "adopt_existing_files is an ExactlyOnceSink option: a DatasetSink's root must hold no files of other tools "
                "(its tables are made by its batches). Adopt the files into a table of their own with ExactlyOnceSink.",
                key="adopt_existing_files",
            )
        sink_options.validate_table_formats(formats)
        compacted_off = [o.name or "(datasets)" for o in self.outputs if (o.format or sink_options.format) not in COMPACTED_FORMATS]
        if sink_options.compaction is not None and compacted_off:
            raise ConfigError(
                f"compaction rewrites Parquet files, of parquet, Delta and Iceberg tables; output {compacted_off[0]!r} "
                "writes another format. Turn compaction off, or write that output as parquet.",
                key="compaction",
            )
        super().__init__(root, sink_options)
        if self.options.staging_mode == "direct":
            raise ConfigError(
                "DatasetSink stages every batch under the root's _seo/staging and renames files into their "
                "tables (one commit across tables); staging_mode='direct' is not available for it.",
                key="staging_mode",
            )
        for output in self.outputs:
            fmt = output.format or self.options.format
            check_evolving_format(self.options.schema_evolution, fmt)
            if fmt not in DIRECT_FORMATS:
                raise ConfigError(
                    f"DatasetSink writes {', '.join(DIRECT_FORMATS)}; output {output.name or '(datasets)'!r} asks for {fmt!r}",
                    key="format",
                )
        if not self.options.spark_manifest:
            raise ConfigError(
                "DatasetSink always publishes _spark_metadata in its tables; spark_manifest=False is an ExactlyOnceSink option.",
                key="spark_manifest",
            )
        self.staging_mode = "rename"
        self.counters["rejected_tables"] = 0
        self.counters["quarantined_rows"] = 0

    def _runs_on_workers(self) -> str | None:
        return "its mapInArrow writer"

    def _make_committer(self) -> GroupCommitter:
        options = self.options.committer_options()
        formats = {f for o in self.outputs for f in table_formats(self._format(o))}
        if "delta" in formats:  # settings of the outputs' Delta tables
            options = replace(
                options,
                delta=DeltaSettings(
                    checkpoint_interval=self.options.delta_checkpoint_interval,
                    log_retention_ms=self.options.delta_log_retention_ms,
                ),
            )
        if "iceberg" in formats:  # ... and of their Iceberg tables
            options = replace(options, iceberg=IcebergSettings(snapshots_to_keep=self.options.iceberg_snapshots_to_keep))
        return GroupCommitter(self.storage, options)

    def _files_format(self, output: Output) -> str:
        """The format of an output's data files (a Delta or Iceberg table's are Parquet)."""
        fmt = self._format(output)
        return "parquet" if table_formats(fmt) else fmt

    def _format(self, output: Output) -> str:
        """An output's format: ``delta`` tables hold Parquet files and a Delta log."""
        return output.format or self.options.format

    # -- per batch -----------------------------------------------------------------------------

    def _check_columns(self, df: DataFrame) -> None:
        """Columns are checked per output, after its transform (``_prepare``)."""

    def _check_start(self, stream_df: DataFrame) -> None:
        """At ``start``: the columns an output without a transform names are in the stream (an
        output's transform may use what only a batch allows: its columns are checked per batch)."""
        names = set(stream_df.columns)
        for output in self.outputs:
            if output.transform is not None:
                continue
            partition_by = tuple(output.partition_by if output.partition_by is not None else self.options.partition_by)
            missing = [c for c in (*partition_by, *([output.dataset_column] if output.dataset_column else [])) if c not in names]
            if missing:
                raise ConfigError(
                    f"output {output.name or '(datasets)'!r}: column(s) {missing} (partition_by / dataset_column) are not in "
                    f"the stream; its columns are {sorted(names)}",
                    key="partition_by",
                )

    def _check_start_schema(self, stream_df: DataFrame, *, holds_table: bool) -> None:
        """Each table of the group has its own schema; which tables a batch writes depends on
        its rows, so they are checked per batch (``member_schemas``)."""

    def _fit_schema(self, df: DataFrame, what: str) -> Callable[[DataFrame], DataFrame]:
        """Per table, in ``member_schemas`` and the tasks (``conform_arrow``)."""
        return lambda batch: batch

    def member_schemas(self, output: Output, data_schema: str, partition_by: tuple[str, ...], fmt: str) -> tuple[dict[str, Verdict], dict[str, str]]:
        """How the output's rows fit each of its existing tables (``commit.table_schema``): the
        verdict per table, and the schema to conform the rows of each table that needs it to -
        before anything is written. A table the rows do not fit is refused later, by the policy."""
        verdicts: dict[str, Verdict] = {}
        conform: dict[str, str] = {}
        for table in _tables_of(output, self.committer.current_state().table_names()):
            guard = self.committer.member_schema(table, format=fmt, partition_by=partition_by)
            verdict = verdicts[table] = guard.judge(data_schema, partition_by)
            if verdict.fits and verdict.needs_alignment:
                conform[table] = verdict.schema
        return verdicts, conform

    def _prepare(self, df: DataFrame, output: Output) -> tuple[DataFrame, tuple[str, ...], list[Check], bool]:
        out = output.transform(df) if output.transform is not None else df
        if not isinstance(out, DataFrame):
            raise ConfigError(f"the transform of output {output.name!r} returned {type(out).__name__}, not a DataFrame", key="outputs")
        partition_by = tuple(output.partition_by if output.partition_by is not None else self.options.partition_by)
        names = set(out.columns)
        wanted = [*partition_by, *([output.dataset_column] if output.dataset_column else [])]
        missing = [c for c in wanted if c not in names]
        if missing:
            raise ConfigError(
                f"output {output.name or '(datasets)'!r}: column(s) {missing} (partition_by / dataset_column) are not in "
                f"its rows; its columns are {sorted(names)}",
                key="partition_by",
            )
        check_partition_types(out.schema, tuple(wanted), what="DatasetSink")
        checks = list(output.checks if output.checks is not None else self.group.checks)
        rows = row_checks(checks)
        if rows:
            failed = [F.when(~F.coalesce(F.expr(c.expression or "true"), F.lit(False)), F.lit(c.name)) for c in rows]
            out = out.withColumn(FAILED, F.concat_ws(CHECK_SEPARATOR, *failed))
        return out, partition_by, checks, bool(rows)

    def _stage_and_commit(self, df: DataFrame, attempt: BatchAttempt, inputs: BatchFilters, offsets: OffsetSeq | None) -> CommitResult:
        t_stage = time.perf_counter()
        forked = len(self.outputs) > 1
        if forked:
            df = df.persist()
        tables: dict[str, _TableFiles] = {}
        output_checks: dict[str, list[Check]] = {}
        verdicts: dict[str, Verdict] = {}
        try:
            for output in self.outputs:
                out, partition_by, checks, has_failed = self._prepare(df, output)
                marks = tuple(c for c in self.options.watermark_columns if c in out.columns)
                data_schema = out.drop(*[c for c in (FAILED, output.dataset_column) if c])
                judged, conform = self.member_schemas(output, data_schema.schema.json(), partition_by, self._format(output))
                verdicts.update(judged)
                task_writer = GroupTaskWriter(
                    storage=self.storage,
                    staging=attempt.staging_dir,
                    output=output,
                    format=self._files_format(output),
                    partition_by=partition_by,
                    options={**self.options.writer_options, **dict(output.options or {})},
                    watermark_columns=marks,
                    has_failed_column=has_failed,
                    conform=conform,
                )
                # without row checks, only the writer's own checks (NULL dataset, names too long) add the column
                quarantine_schema = (
                    out.withColumnRenamed(FAILED, FAILED_CHECKS) if has_failed else out.withColumn(FAILED_CHECKS, F.lit(None).cast("string"))
                )
                for row in out.mapInArrow(task_writer, result_ddl(RESULT_FIELDS)).collect():
                    entry = tables.get(row["table"])
                    if entry is None:
                        schema = data_schema.schema if row["kind"] == "data" else quarantine_schema.schema
                        written = conform.get(row["table"], schema.json()) if row["kind"] == "data" else schema.json()
                        entry = tables[row["table"]] = _TableFiles(
                            table=row["table"],
                            output=output,
                            kind=row["kind"],
                            schema=written,
                            fields={f.name: f.dataType.simpleString() for f in schema.fields},
                        )
                        output_checks[row["table"]] = checks
                    entry.add(row)
        finally:
            if forked:
                df.unpersist()
        skipped = inputs.skipped_rows()
        attempt.timings["stage"] = round((time.perf_counter() - t_stage) * 1000, 3)
        members, rejected, mismatched = self._plan(tables, output_checks, verdicts)
        if rejected and self.group.policy == "full":
            self._reject(attempt, rejected, mismatched)
        ends = source_partitions(list(offsets.offsets)) if offsets is not None else {}
        topics = sorted({p.rsplit("/", 1)[0] for parts in ends.values() for p in parts})
        expected = {o.table_for(topic): parts for o in self.outputs if o.dataset_column for topic, parts in expected_by_dataset(ends, topics).items()}
        result = self.committer.commit_group(
            attempt,
            members,
            input_files=inputs.new_inputs,
            source_ends=ends,
            expected=expected,
            schema=df.schema.json(),
            no_data=inputs.must_commit,
        )
        if skipped:
            log.info("batch %d: %d row(s) of input files committed earlier were dropped", attempt.spark_batch_id, skipped)
        self.counters["rejected_tables"] += len(rejected)
        self.counters["quarantined_rows"] += sum(t.stats.rows for t in tables.values() if t.kind == "quarantine")
        return result

    def _plan(
        self, tables: dict[str, _TableFiles], output_checks: dict[str, list[Check]], verdicts: dict[str, Verdict]
    ) -> tuple[list[MemberBatch], dict[str, list[CheckResult]], dict[str, SchemaMismatchError]]:
        """Evaluate batch checks per table; the member batches to publish, the failures, and
        the tables whose schema the batch does not fit (their failure is a ``table schema`` check)."""
        members: list[MemberBatch] = []
        rejected: dict[str, list[CheckResult]] = {}
        mismatched: dict[str, SchemaMismatchError] = {}
        prefix = QUARANTINE_ROWS + "/"
        quarantined = {t.table[len(prefix) :]: t for t in tables.values() if t.kind == "quarantine"}
        for name, t in sorted(tables.items()):
            fmt = self._format(t.output)
            files_fmt = self._files_format(t.output)  # quarantine tables hold the files only
            options = {**self.options.writer_options, **dict(t.output.options or {})}
            dataset = name[len(prefix) :] if t.kind == "quarantine" else name
            checks = output_checks[name]
            bad_rows = quarantined.get(dataset)
            row_results = [
                CheckResult(
                    c.name,
                    not (bad_rows and bad_rows.stats.failed.get(c.name)),
                    False,
                    f"{bad_rows.stats.failed.get(c.name, 0) if bad_rows else 0} row(s) quarantined",
                )
                for c in row_checks(checks)
            ] + [  # the writer's own checks are listed only when rows failed them
                CheckResult(name, False, False, f"{bad_rows.stats.failed[name]} row(s) quarantined")
                for name in BUILTIN_ROW_CHECKS
                if bad_rows and bad_rows.stats.failed.get(name)
            ]
            if t.kind == "quarantine":
                alone = dataset not in tables  # no row of the dataset passed: this stands in for it
                members.append(
                    MemberBatch(
                        table=name,
                        files=t.files,
                        rows=t.stats.rows,
                        format=files_fmt,
                        writer_options=options,
                        schema=t.schema,
                        dataset=dataset if alone else None,
                        status="quarantined",
                        checks=[r.to_json() for r in row_results] if alone else [],
                        quarantined_rows=t.stats.rows if alone else 0,
                    )
                )
                continue
            batch_results = [c.evaluate(t.metrics()) for c in batch_checks(checks)]
            partition_by = tuple(t.output.partition_by if t.output.partition_by is not None else self.options.partition_by)
            schema_error = self._schema_error(name, t, fmt, partition_by, verdicts)
            if schema_error is not None:
                mismatched[name] = schema_error
                batch_results.append(CheckResult(SCHEMA_CHECK, False, True, "; ".join(schema_error.problems)))  # type: ignore[attr-defined]
            results = batch_results + row_results
            failures = mandatory_failures(results)
            for r in batch_results:
                if not r.passed and not r.mandatory:
                    log.warning("table %s: optional check %r failed (%s)", name, r.name, r.detail)
            mb = MemberBatch(
                table=name,
                files=t.files,
                rows=t.stats.rows,
                format=fmt,
                partition_by=partition_by,
                writer_options=options,
                watermarks=t.stats.watermarks(),
                schema=t.schema,
                checks=[r.to_json() for r in results],
                quarantined_rows=bad_rows.stats.rows if bad_rows else 0,
            )
            if failures:
                rejected[name] = failures
                mb.status, mb.dataset, mb.table, mb.format = "rejected", name, f"{QUARANTINE_BATCHES}/{name}", files_fmt
                log.warning("table %s: mandatory check(s) failed: %s", name, "; ".join(f"{r.name} ({r.detail})" for r in failures))
            members.append(mb)
        return members, rejected, mismatched

    def _schema_error(
        self, name: str, t: _TableFiles, fmt: str, partition_by: tuple[str, ...], verdicts: dict[str, Verdict]
    ) -> SchemaMismatchError | None:
        """Why table ``name``'s rows of this batch do not fit its schema (None: they fit)."""
        guard = self.committer.member_schema(name, format=fmt, partition_by=partition_by)
        verdict = verdicts.get(name) or guard.judge(t.schema, partition_by)
        if verdict.fits:
            return None
        return guard.error(verdict.mismatches, what=f"Table {name!r} of this batch")

    def _reject(
        self, attempt: BatchAttempt, rejected: dict[str, list[CheckResult]], mismatched: dict[str, SchemaMismatchError] | None = None
    ) -> None:
        path = write_rejection(
            self.storage,
            query_id=attempt.query_id,
            spark_batch_id=attempt.spark_batch_id,
            attempt=attempt.attempt,
            record={
                "timeMs": int(time.time() * 1000),
                "policy": self.group.policy,
                "tables": {t: [r.to_json() for r in rs] for t, rs in rejected.items()},
            },
        )
        detail = "; ".join(f"{t}: " + ", ".join(f"{r.name} ({r.detail})" for r in rs) for t, rs in sorted(rejected.items()))
        if mismatched:  # the named error of the first table whose schema the batch does not fit
            first = mismatched[min(mismatched)]
            raise type(first)(
                f"Batch {attempt.spark_batch_id} of query {attempt.query_id}: nothing of it was published (policy='full'); "
                f"recorded in {self.storage.uri(path)}. {first.message}\nOr use policy='partial' to publish the other "
                "tables and quarantine this one's batch.",
                **{**first._attrs, "batch_id": attempt.spark_batch_id, "tables": sorted(rejected)},
            )
        raise BatchRejectedError(
            f"Batch {attempt.spark_batch_id} of query {attempt.query_id} failed mandatory check(s) and, under "
            f"policy='full', nothing of it was published: {detail}. Recorded in {self.storage.uri(path)}. Fix the "
            "data or the checks and restart the query (Spark re-runs the batch), or use policy='partial' to "
            "publish the passing tables and quarantine the failing ones.",
            batch_id=attempt.spark_batch_id,
            tables=sorted(rejected),
        )

    def _event_details(self, result: CommitResult) -> dict[str, Any]:
        """The tables this batch touched, with their status, own batch id and checks."""
        record = result.record
        assert record is not None
        return {
            "tables": {
                name: {"status": e.status, "batchId": e.batch_id, "checks": e.checks or []}
                for name, e in GroupState.from_json(record.datasets).tables.items()
                if e.last_group_batch == record.batch_id
            }
        }

    # -- inspection ----------------------------------------------------------------------------

    def watermarks(self) -> dict[str, dict[str, Any]]:
        """Per table: its latest batch, status, rows, watermarks (low/high/batch min-max) and
        the expected high the source gave - kept for tables absent from recent batches."""
        return {name: e.to_json() for name, e in self.committer.current_state().tables.items()}

    def tables(self) -> list[str]:
        return tables_in(self.committer.current_state())

    def rejections(self) -> list[dict[str, Any]]:
        """Batches the ``full`` policy refused to publish, with the checks that failed."""
        return read_rejections(self.storage)


document(DatasetSink, GroupKeywords, "root", own=True)
