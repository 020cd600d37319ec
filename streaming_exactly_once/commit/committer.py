"""``TableCommitter``: one table's batches, each published exactly once, independent of Spark.

A batch's sequence (``commit.protocol.steps`` says what each step writes and how it knows it is done)::

    [move]      rename mode: the staged files into the table
    [schema]    _seo/schema/M: the table's schema, when the batch creates or changes it
    manifest    _spark_metadata/M (or _seo/manifest/M): the visibility point
    [delta]     format="delta": one Delta commit with the transaction (app id, M)
    [iceberg]   format="iceberg": one Iceberg snapshot, the table's high-water property set to M
                (both, in this order, for format=["delta", "iceberg"])
    offsets     _seo/offsets/M  }  the batch's query, Spark batch and source offsets; its input
    sources     _seo/sources/M  }  files; what it committed - written at the same time, the
    ledger      _seo/ledger/M   }  first two and the ledger (what the batch read, wrote and
    commit      _seo/commits/M  }  published: ``commit.table_steps.ledger_step``) without waiting for the disk
    [cleanup]   direct mode: the attempt's intents

The shared part - lease, recovery, attempts, the engine that claims and runs a sequence, the
housekeeping after it - is ``commit.writer``; ``docs/design/commit-protocol.md`` explains the
order and what a crash at each point leaves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from ..checkpoint.reader import InputFile
from ..errors import ConfigError
from ..iceberg.engine import METADATA_DIR
from ..log.compactible_log import CompactibleLog
from ..log.compaction import all_valid_batches, is_compaction_batch
from ..manifest.entry import ManifestEntry
from ..manifest.manifest_index import delete_stale_indexes, index_matches, write_index
from ..manifest.manifest_log import ManifestLog
from ..storage.base import Storage
from ..table.commits_log import CommitRecord
from ..table.identity import TableSpec
from ..table.ledger import LedgerRecord
from ..table.library_queries import ADOPTION_QUERY
from ..table.schema_log import SchemaRecord
from ..table.table_logs import TableLogs
from .adoption import Adoption, check_partition_values, existing_files_error, plan_adoption, readable_files
from .background.compaction_preparation import preparation_of
from .ledger_enforce import batch_ledger, enforce
from .options import CommitterOptions
from .protocol.attempt import BatchAttempt, CommitResult, StagedFile, elapsed_ms, sources_step
from .protocol.lease import fenced_cause
from .protocol.recovery import INTENTS_SUBDIR, ManifestView, PublishedView, RecoveryReport
from .protocol.step import CommitStep
from .protocol.steps import CleanupStaging, MoveFiles, PublishManifest, WriteCommit
from .rewrites.table_rewrites import BatchRewrites, TableRewrites, leftovers_of
from .table_plan import TableBatchAsk, TableBatchPlan, TableFormats, plan_table_batch
from .table_schema import TableSchema, table_format_of, with_partition_columns
from .table_steps.ledger_step import WriteLedger, file_entry
from .table_steps.schema_step import WriteSchema
from .writer import Writer

log = logging.getLogger("streaming_exactly_once.commit")

__all__ = ["BatchAttempt", "CommitResult", "CommitterOptions", "StagedFile", "TableCommitter", "index_compact"]


class TableCommitter(Writer):
    """Commits batches of data files to one table, exactly once per (query id, Spark batch id)."""

    def __init__(self, storage: Storage, options: CommitterOptions | None = None) -> None:
        super().__init__(storage, options or CommitterOptions())
        vouch_by_index(self.logs.require_manifest())
        options = self.options
        #: the table's schema, loaded at ``open`` (``commit.table_schema``)
        self.schemas = TableSchema(
            storage,
            evolution=options.schema_evolution,
            file_format=options.format,
            table_format=table_format_of(delta=options.delta is not None, iceberg=options.iceberg is not None),
        )
        #: small data files rewritten in the background for the compaction batches (None: compaction off)
        self.rewrites = None if options.compaction is None else TableRewrites(storage, self.housekeeping, options.compaction)
        #: the existing files the first batch adopts (``commit.adoption``); None: none, or not asked
        self.adoption: Adoption | None = None

    # -- a single table ----------------------------------------------------------------------

    def _spec(self) -> TableSpec:
        options = self.options
        return TableSpec(
            compact_interval=options.compact_interval,
            format=options.format,
            partition_by=tuple(options.partition_by),
            writer_options=tuple(options.writer_options),
            delta=options.delta is not None,
            spark_manifest=options.spark_manifest,
            iceberg=options.iceberg_catalog if options.iceberg is not None else None,
        )

    def _view(self) -> PublishedView:
        return ManifestView(self.logs)

    def _forget_tables(self) -> None:
        if self.rewrites is not None:  # the recovery deletes their staging directory
            self.rewrites.forget()

    def open(self) -> RecoveryReport:
        report = super().open()
        self._queue_rewrite(start=True)
        return report

    def close(self) -> None:
        if self.rewrites is not None:
            self.rewrites.stop()
            self.housekeeping.drain()
            if self._may_discard_prepared():
                self.rewrites.discard()
        super().close()

    def _load_state(self, newest: CommitRecord | None) -> None:
        """The table schema batches are checked against (``commit.table_schema``); an existing
        Delta table without batches of ours starts from its Delta log's schema."""
        assert self.identity is not None
        target = self.delta if self.latest_batch_id < 0 else None
        self.schemas.load(
            self.latest_batch_id,
            commits=self.logs.commits,
            first_batch_id=self.identity.first_batch_id,
            partition_by=self.identity.partition_by,
            fence=self.lease.check_fence,
            delta_schema=target.schema_json() if target is not None else None,
            delta_log=target.log_uri if target is not None else None,
            adopted_files=(self.adoption.schema, self.adoption.source()) if self.adoption is not None else None,
        )

    # -- a directory that holds files before the first batch (``commit.adoption``) -----------

    def _adopts(self) -> bool:
        return self.options.adopt_existing_files

    def _check_directory(self) -> None:
        """Before the first batch: files readers of the directory read are refused, or planned
        for adoption. An existing Delta or Iceberg table opened with its format is adopted by
        that format's batch 0 instead (``_adopted_entries``)."""
        self.adoption = None
        if self.latest_batch_id >= 0 or self._format_table_exists():
            return
        files = readable_files(self.storage, skip=self._own_dirs())
        if not files:
            return
        if not self.options.adopt_existing_files:
            raise existing_files_error(self.storage, files)
        self.adoption = plan_adoption(self.storage, files, file_format=self.options.format, partition_by=self.options.partition_by)
        log.info(
            "table %s: its first batch adopts %d existing file(s), e.g. %s", self.storage.root_uri, len(self.adoption.files), self.adoption.example
        )

    def _format_table_exists(self) -> bool:
        return (self.delta is not None and self.delta.load() is not None) or (self.iceberg is not None and self.iceberg.load() is not None)

    def _own_dirs(self) -> tuple[str, ...]:
        """Directories of the table's own that readers of the plain directory would read: an Iceberg table's metadata."""
        return (f"{METADATA_DIR}/",) if self.iceberg is not None else ()

    def adopt_existing(self, schema: Callable[[], str]) -> None:
        """Before a table's first batch stages anything: publish the files its directory holds as
        a batch of their own (``ADOPTION_QUERY``), so that from then on the directory has a
        manifest and no reader of it sees a file of a batch that has not committed. ``schema``:
        the stream's batch as the table will hold it (its partition columns' types)."""
        self.ensure_open()
        if self.adoption is None and self.latest_batch_id < 0:
            self._check_late_files()
        if self.adoption is None:
            return
        self.adoption = None if self.latest_batch_id >= 0 else self._adoption_now()
        if self.adoption is None:
            return
        # the files' columns, and the partition columns typed as the stream types them; columns
        # only the stream has are the first batch's to add (a schema record ``evolve``)
        stream = schema()
        self.schemas.check(stream, self.options.partition_by, what="The stream's first batch")  # refused before anything is adopted
        adopted_schema = with_partition_columns(self.adoption.schema, stream, self.options.partition_by)
        check_partition_values(self.storage, self.adoption, adopted_schema, self.options.partition_by)
        n = self.last_spark_batch(ADOPTION_QUERY)
        with self.batch(ADOPTION_QUERY, 0 if n is None else n + 1, mode="rename") as attempt:
            self.commit(attempt, [], num_rows=0, schema=adopted_schema, no_data=True)
        log.info("table %s: adopted its existing files in batch 0", self.storage.root_uri)

    def _check_late_files(self) -> None:
        """Files that landed since the writer opened the table: refused, or planned for adoption
        (the stream is then checked against them, as at the open)."""
        self._check_directory()
        if self.adoption is not None:
            self._load_state(None)

    def begin(self, query_id: str, spark_batch_id: int, **intent: Any) -> BatchAttempt:
        """``Writer.begin``, refused while existing files wait for their adoption (``adopt_existing`` first)."""
        if self.adoption is not None and query_id != ADOPTION_QUERY:
            raise ConfigError(
                f"Table {self.storage.root_uri}: the files its directory holds ({self.adoption.example}) are adopted in a "
                "batch of their own before its first batch: call adopt_existing(schema) first. Nothing was written.",
                table=self.storage.root_uri,
                key="adopt_existing_files",
            )
        return super().begin(query_id, spark_batch_id, **intent)

    def _adoption_now(self) -> Adoption | None:
        """The adoption as the directory is right before its claim: listed again (no file of the
        stream's is there yet: the adoption precedes the first batch's staging)."""
        assert self.adoption is not None
        found = readable_files(self.storage, skip=self._own_dirs())
        if not found:
            return None
        adoption = plan_adoption(self.storage, found, file_format=self.options.format, partition_by=self.options.partition_by)
        if adoption.schema != self.adoption.schema:
            raise ConfigError(
                f"Table {self.storage.root_uri}: the files it adopts changed since the writer opened it ({adoption.example} "
                f"has other columns than {self.adoption.example} had), so the batch was checked against a schema they no "
                "longer have. Nothing was written. Restart the query: the table is opened again with the files as they are.",
                table=self.storage.root_uri,
                key="adopt_existing_files",
            )
        return adoption

    def _all_logs(self) -> list[CompactibleLog[Any]]:
        return list(self.logs.all_logs())

    def _prepare(self) -> None:
        preparation_of(self.logs.require_manifest()).advance()
        preparation_of(self.logs.require_sources()).advance()

    def _history_is_large(self) -> bool:
        """Whether the manifest's newest compact file is one the storage copies (at least
        ``copy_threshold`` bytes, ~4,000 entries): compactions then cost more than imports."""
        manifest = self.logs.require_manifest()
        if self.latest_batch_id < 0:
            return False
        compact_id = all_valid_batches(self.latest_batch_id, manifest.interval)[0]  # the newest compact, if any
        if not is_compaction_batch(compact_id, manifest.interval):
            return False
        try:
            return self.storage.info(manifest.path(compact_id)).size >= manifest.copy_threshold
        except FileNotFoundError:
            return False

    # -- a batch -----------------------------------------------------------------------------

    def commit(
        self,
        attempt: BatchAttempt,
        files: Sequence[StagedFile],
        *,
        input_files: Sequence[InputFile] = (),
        num_rows: int | None = None,
        num_skipped_rows: int = 0,
        watermarks: dict[str, dict[str, Any]] | None = None,
        schema: str | None = None,
        no_data: bool = False,
    ) -> CommitResult:
        """Publish the attempt's files as manifest batch ``attempt.batch_id``, exactly once.
        ``no_data``: a batch of no files is committed all the same (``seo compact``'s batches:
        a compaction batch that publishes only rewrites, and the empty batches before it)."""
        if not no_data and (num_rows == 0 or not files):
            self.abort(attempt)
            return CommitResult(attempt.query_id, attempt.spark_batch_id, "empty", timings=dict(attempt.timings))
        t_plan = time.perf_counter()
        m = attempt.batch_id
        epoch = self.lease.epoch or 0
        plan, adoption = self._plan(attempt, files, schema)
        ledger = self._ledger(attempt, files, plan, input_files, num_rows, num_skipped_rows, adoption)
        now_ms = int(time.time() * 1000)
        record = attempt.record(
            m,
            epoch=epoch,
            files=files,
            num_rows=num_rows,
            now_ms=now_ms,
            step_ms=dict(attempt.timings),
            watermarks=watermarks or {},
            num_skipped_rows=num_skipped_rows,
            source_files=len(input_files),
            schema=schema,
            table_rows=None if self._table_rows is None or num_rows is None else self._table_rows + num_rows + (adoption.rows if adoption else 0),
            rewrites=plan.rewrites.notes(),
        )
        if adoption is not None:  # the batch publishes the adopted files: its counts hold them (``seo log``, ``read.batches``)
            adopted_bytes = sum(f.size for f in adoption.files)
            num_all = (num_rows or 0) + adoption.rows
            record = replace(record, num_files=record.num_files + len(adoption.files), num_bytes=record.num_bytes + adopted_bytes, num_rows=num_all)
        steps = self._steps(attempt, plan, ledger, record, input_files)
        seq = attempt.sequence(steps, epoch=epoch, now_ms=now_ms)
        indexed = self.options.build_manifest_index and is_compaction_batch(m, self.logs.require_manifest().interval)
        ctx = self._run(
            attempt,
            seq,
            t_plan,
            retention=[(log_, m) for log_ in self.logs.all_logs()],
            indexes=[("index", partial(index_compact, self.logs, m))] if indexed else (),
            leftovers=leftovers_of([plan.rewrites]),
            synced=frozenset(f.staged for f in files if f.staged is not None and f.read is not None),
        )
        self.schemas.committed(plan.new_schema, m)
        self.adoption = None
        result = self._finish(attempt, record, input_files, ctx)
        self._queue_rewrite()
        return result

    def _plan(self, attempt: BatchAttempt, files: Sequence[StagedFile], schema: str | None) -> tuple[TableBatchPlan, Adoption | None]:
        """The batch's plan (``commit.table_plan``), checked before the claim; and the existing
        files an adoption batch publishes."""
        new_schema = self._schema_record(attempt, schema)
        adoption = self.adoption if attempt.query_id == ADOPTION_QUERY else None  # listed and checked by ``adopt_existing``
        ask = TableBatchAsk(
            storage=self.storage,
            attempt=attempt,
            batch_id=attempt.batch_id,
            files=files,
            schema=schema,
            new_schema=new_schema,
            partition_by=tuple(self.options.partition_by),
            formats=TableFormats(self.delta, self.iceberg),
            rewrites=partial(self._batch_rewrites, attempt.batch_id, attempt.timings),
            moved=attempt.mode == "rename",
            adoption=adoption,
            format_entries=self._adopted_entries,
            timings=attempt.timings,
            count_rows=True,
            compaction=is_compaction_batch(attempt.batch_id, self.logs.require_manifest().interval),
        )
        return plan_table_batch(ask), adoption

    @staticmethod
    def _steps(
        attempt: BatchAttempt, plan: TableBatchPlan, ledger: LedgerRecord, record: CommitRecord, input_files: Sequence[InputFile]
    ) -> list[CommitStep]:
        """The batch's sequence, in the order the module docstring shows."""
        m = plan.batch_id
        steps: list[CommitStep] = [MoveFiles(moves=plan.moves)] if plan.moves else []
        if plan.new_schema is not None:  # before the visibility point: who sees the batch finds its schema
            steps.append(WriteSchema(record=plan.new_schema))
        steps += [PublishManifest(batch_id=m, entries=plan.entries, replaced=plan.rewrites.replaced), *plan.format_steps]
        steps += [attempt.offsets_step(m), sources_step(m, input_files), WriteLedger(record=ledger), WriteCommit(record=record)]
        if attempt.mode == "direct":
            steps.append(CleanupStaging(path=f"{attempt.staging_dir}/{INTENTS_SUBDIR}"))
        return steps

    def _batch_rewrites(self, batch_id: int, timings: dict[str, float]) -> BatchRewrites:
        """The rewrites compaction batch ``batch_id`` publishes (none: compaction off, or not such a batch)."""
        return BatchRewrites() if self.rewrites is None else self.rewrites.for_batch(self.logs.require_manifest(), batch_id, timings)

    def _queue_rewrite(self, *, start: bool = False) -> None:
        """Plan the rewrites of the next compaction batch once the batch before it committed (or
        at a start), in the background (``commit.rewrites.table_rewrites``)."""
        if self.rewrites is not None:
            self.rewrites.plan(self.logs.require_manifest(), self.latest_batch_id, start=start)

    def _ledger(
        self,
        attempt: BatchAttempt,
        files: Sequence[StagedFile],
        plan: TableBatchPlan,
        input_files: Sequence[InputFile],
        num_rows: int | None,
        num_skipped_rows: int,
        adoption: Adoption | None = None,
    ) -> LedgerRecord:
        """The batch's ledger (``commit.table_steps.ledger_step``), built before the claim from the files in
        hand; under ``audit="enforce"`` checked too: a violation raises before anything is published."""
        t0 = time.perf_counter()
        try:
            ledger = batch_ledger(
                self,
                attempt,
                [(f.staged or f.final, f.final, f.size, f.rows) for f in files],
                plan.rewrites,
                input_files=input_files,
                num_rows=num_rows,
                num_skipped_rows=num_skipped_rows,
                reads={f.staged: f.read for f in files if f.staged is not None and f.read is not None},
            )
        except FileNotFoundError as exc:  # it reads the staged files: a successor's recovery removed them
            fenced = fenced_cause(self.storage, self.lease.epoch, "stage")
            if fenced is not None:
                raise fenced from exc
            raise
        published: dict[str, int | None] = {"manifest": attempt.batch_id}
        published.update({name: None for name, yes in plan.published().items() if yes})
        ledger = replace(ledger, published=published)
        if adoption is not None:  # named, with their checksums, apart from the batch's own rows
            ledger = replace(ledger, adopted=tuple(file_entry(self.storage, f.path, f.path, f.size, f.rows) for f in adoption.files))
        attempt.timings["ledgerBuild"] = elapsed_ms(t0)
        if self.options.audit == "enforce":
            enforce(ledger, self.offset_marks(), table=self.storage.root_uri)
        return ledger

    def _schema_record(self, attempt: BatchAttempt, schema: str | None) -> SchemaRecord | None:
        """Check (before any claim) that the batch's files fit the table schema; the schema
        record the batch writes, if it creates or changes the schema (``commit.table_schema``)."""
        if schema is None:
            return None  # a caller that knows no schema (tests of the protocol alone)
        what = f"Batch {attempt.spark_batch_id} of query {attempt.query_id}"
        verdict = self.schemas.check_files(schema, self.options.partition_by, what=what)
        return self.schemas.record_for(verdict, attempt.batch_id, self.options.partition_by)

    def _adopted_entries(self) -> list[ManifestEntry]:
        """Manifest batch 0 of a table adopted from an existing Delta or Iceberg table: its files
        too, so that ``_spark_metadata`` readers see the same rows as that format's readers
        (``spark_manifest`` only). With both formats, both must hold the same files already."""
        if not self.options.spark_manifest:
            return []
        found: dict[str, list[tuple[str, int, int]]] = {}
        if self.delta is not None:
            found["Delta"] = [(f.path, f.size, f.mtime_ms) for f in self.delta.live_files()]
        if self.iceberg is not None:
            found["Iceberg"] = [(f.path, f.size, f.mtime_ms) for f in self.iceberg.live_files()]
        existing = [files for files in found.values() if files]
        if len(existing) > 1 and {p for p, _, _ in existing[0]} != {p for p, _, _ in existing[1]}:
            raise ConfigError(
                f"Table {self.storage.root_uri}: its existing Delta and Iceberg tables hold different files, so their readers "
                "would see different rows after adoption. Adopt one format, or write format=['delta', 'iceberg'] to a new table.",
                table=self.storage.root_uri,
                key="format",
            )
        files = existing[0] if existing else []
        parts = tuple(self.options.partition_by)
        for path, _, _ in files:
            dirs = path.split("/")[:-1]
            if len(dirs) != len(parts) or any(not d.startswith(f"{c}=") for d, c in zip(dirs, parts, strict=False)):
                raise ConfigError(
                    f"Table {self.storage.root_uri}: the existing table's file {path} is not laid out as the sink lays out its "
                    f"files (<table>/{'/'.join(f'{c}=<value>' for c in parts) or '<file>'}), so Spark's readers of _spark_metadata "
                    "could not read the two side by side. Write with spark_manifest=False, or have the existing table's writer put "
                    "its files there (Iceberg: the table property write.data.path = the table's location).",
                    table=self.storage.root_uri,
                    key="spark_manifest",
                )
        return [ManifestEntry.for_file(self.storage.uri(p), size=size, modification_time=mtime) for p, size, mtime in files]


def vouch_by_index(manifest: ManifestLog) -> None:
    """The writer takes a manifest compact file whose reader index matches it as checked line by
    line (the index's builder parsed every line of the file as it is now), so the storage may
    copy it unread into the next compact file (``CompactibleLog.copy_vouched``)."""
    manifest.vouch = partial(index_matches, manifest.storage, log_=manifest)


def index_compact(logs: TableLogs, compact_id: int) -> None:
    """Index compact file ``compact_id`` of a table's manifest, unless retention removed it
    meanwhile (batches can outrun the background thread); then drop older indexes."""
    manifest = logs.require_manifest()
    try:
        write_index(logs.storage, compact_id, manifest)
    except FileNotFoundError:
        log.debug("compact %d of %s is gone before it was indexed; a later one will be", compact_id, logs.storage.root_uri)
        return
    delete_stale_indexes(logs.storage, manifest)
