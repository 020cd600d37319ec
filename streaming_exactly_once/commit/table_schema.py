"""``TableSchema``: one table's schema as its writer holds it - loaded at open, checked per batch.

The writer reads the schema once when it opens the table (after recovery: the newest
``_seo/schema/M`` at or below the latest batch, ``table.schema_log``) and keeps it in memory;
a batch is judged by ``table.schema_rules.compare`` against it, before anything of the batch is
written. A batch that creates or changes the schema gets a ``schema`` commit step
(``commit.table_steps.schema_step``); once that batch has committed, its record is the current one.

Tables that have batches but no schema record (written before this release, or by Spark's own
sink) adopt one at the writer's open: the schema of the newest commit record, written as
``_seo/schema/L`` (``reason: adopt``) with a warning. Without a commit record that has a schema,
the next batch's schema is adopted, with that batch. A ``format="delta"`` table that exists
before its first batch here starts from its Delta log's schema.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..errors import DeltaSchemaMismatchError, IcebergSchemaMismatchError, SchemaMismatchError
from ..storage.base import Storage
from ..table.commits_log import CommitsLog
from ..table.identity import read_identity
from ..table.schema_log import SchemaRecord, forget_after, read_schema, schema_as_of, schema_batches, schema_path
from ..table.schema_rules import Mismatch, Verdict, advice, compare, fields_of, side_by_side, struct_json
from ..table.table_logs import open_manifest
from .table_steps.schema_step import WriteSchema

log = logging.getLogger("streaming_exactly_once.commit")


class TableSchema:
    """The schema of the table at ``storage`` and the rules its batches are judged by."""

    def __init__(self, storage: Storage, *, evolution: str = "none", file_format: str = "parquet", table_format: str | None = None) -> None:
        self.storage = storage
        self.evolution = evolution
        self.file_format = file_format
        #: ``"delta"``, ``"iceberg"``, ``"delta+iceberg"`` (``table_format_of``) or None: a table
        #: format's schema is never widened, and its errors name the format
        self.table_format = table_format
        #: the newest record at or below the latest batch (None: the table has none yet)
        self.current: SchemaRecord | None = None
        #: where the schema comes from while there is no record: an existing Delta table's
        #: log (its URI names it in errors), or the existing files the first batch adopts, and
        #: that schema
        self.delta_log: str | None = None
        self.base: str | None = None
        #: the base is of adopted files: their partition columns' types are the batch's
        self.base_without_partitions = False
        self.latest = -1
        #: recent judgements by what they judged: a stream's batches have one schema (two with the
        #: sink's projection onto the table's), judged once
        self._judged: dict[tuple[str | None, tuple[str, ...], str, tuple[str, ...], str], Verdict] = {}

    # -- at open -----------------------------------------------------------------------------

    def load(
        self,
        latest: int,
        *,
        commits: CommitsLog,
        first_batch_id: int,
        partition_by: Sequence[str],
        fence: Callable[[str], None] = lambda what: None,
        delta_schema: str | None = None,
        delta_log: str | None = None,
        adopted_files: tuple[str, str] | None = None,
    ) -> None:
        """Read the current schema (module docstring); the caller holds the table's lease.
        ``adopted_files``: the schema of the existing files the first batch adopts (``commit.adoption``;
        no partition columns) and where it comes from, for messages."""
        self.latest = latest
        if any(b > latest for b in schema_batches(self.storage)):
            fence("schema")
            forget_after(self.storage, latest)
        self.current = schema_as_of(self.storage, latest) if latest >= 0 else None
        self.base, self.delta_log, self.base_without_partitions = None, None, False
        if self.current is None and latest >= max(0, first_batch_id):
            adopted = _newest_recorded_schema(commits, latest, first_batch_id)
            if adopted is not None:
                fence("schema")
                record = SchemaRecord(latest, "adopt", tuple(partition_by), adopted)
                try:
                    self.storage.put_if_absent(schema_path(latest), record.to_bytes())
                except FileExistsError:
                    pass
                self.current = read_schema(self.storage, latest)
                log.warning(
                    "table %s had no schema record (written before schema enforcement): adopted the schema of its batch %d "
                    "as the table schema (%s); batches that do not fit it are refused from now on",
                    self.storage.root_uri,
                    latest,
                    self.storage.uri(schema_path(latest)),
                )
        if self.current is None and delta_schema is not None:
            self.base, self.delta_log = delta_schema, delta_log
        elif self.current is None and adopted_files is not None:
            (self.base, self.delta_log), self.base_without_partitions = adopted_files, True

    # -- per batch ---------------------------------------------------------------------------

    @property
    def schema(self) -> str | None:
        """The table's schema JSON now (None: the next batch's becomes it)."""
        return self.current.schema if self.current is not None else self.base

    def judge(self, batch_schema: str, partition_by: Sequence[str], *, evolution: str | None = None) -> Verdict:
        """How ``batch_schema`` fits the table (``schema_rules.compare``); raises nothing."""
        table_parts = self.current.partition_by if self.current is not None else tuple(partition_by)
        table_schema = self.schema
        if self.base_without_partitions and self.current is None and table_schema is not None:
            table_schema = with_partition_columns(table_schema, batch_schema, partition_by)
        key = (table_schema, table_parts, batch_schema, tuple(partition_by), self.evolution if evolution is None else evolution)
        verdict = self._judged.get(key)
        if verdict is None:
            verdict = compare(
                key[0], table_parts, batch_schema, partition_by, evolution=key[4], table_format=self.table_format, file_format=self.file_format
            )
            if len(self._judged) >= 4:
                self._judged.clear()
            self._judged[key] = verdict
        return verdict

    def check(self, batch_schema: str, partition_by: Sequence[str], *, what: str) -> Verdict:
        """``judge``, raising ``SchemaMismatchError`` if the batch does not fit. ``what`` names
        it in the message ("Batch 7 of query ...", "The stream")."""
        verdict = self.judge(batch_schema, partition_by)
        if not verdict.fits:
            raise self.error(verdict.mismatches, what=what)
        return verdict

    def check_files(self, batch_schema: str, partition_by: Sequence[str], *, what: str) -> Verdict:
        """``check`` for a batch whose files are written already (the committer's last check):
        columns narrower than the table's are a mismatch too - the files would mix types (the
        sink casts them before writing); so are CSV columns out of the table's order."""
        verdict = self.check(batch_schema, partition_by, what=what)
        if not verdict.casts and not (verdict.reordered and self.file_format == "csv"):
            return verdict
        by_name = {f["name"]: f for f in fields_of(batch_schema)}
        table = {f["name"]: f for f in fields_of(verdict.schema)}
        extra = [
            Mismatch(c, str(table[c]["type"]), str(by_name[c]["type"]), "narrower than the table's: cast it before writing", "type")
            for c in verdict.casts
        ]
        if verdict.reordered and self.file_format == "csv":
            extra.append(Mismatch("(column order)", "table order", "another order", "CSV files are read by position", "type"))
        if extra:
            raise self.error(extra, what=what)
        return verdict

    def record_for(self, verdict: Verdict, batch_id: int, partition_by: Sequence[str]) -> SchemaRecord | None:
        """The schema record batch ``batch_id`` writes (None: the schema does not change)."""
        if self.current is not None and not verdict.changed:
            return None
        if self.current is not None:
            reason = "evolve"
        elif self.base is not None or batch_id > 0:
            reason = "adopt"  # an existing Delta table's, or a table with batches before any record
        else:
            reason = "create"
        partitions = self.current.partition_by if self.current is not None else tuple(partition_by)
        return SchemaRecord(batch_id, reason, partitions, verdict.schema, verdict.changes if reason == "evolve" else ())

    def step(self, record: SchemaRecord | None, *, table: str | None = None) -> WriteSchema | None:
        return None if record is None else WriteSchema(record=record, table=table)

    def committed(self, record: SchemaRecord | None, batch_id: int) -> None:
        """Batch ``batch_id`` has committed (with ``record`` if it changed the schema)."""
        self.latest = batch_id
        if record is not None:
            self.current = record
            self.base, self.base_without_partitions = None, False

    # -- errors ------------------------------------------------------------------------------

    @property
    def is_delta(self) -> bool:
        return "delta" in (self.table_format or "").split("+")

    def error(self, mismatches: Sequence[Mismatch], *, what: str) -> SchemaMismatchError:
        if self.current is not None:
            source = self.storage.uri(schema_path(self.current.batch_id))
        else:
            source = self.delta_log or ("the Delta log" if self.is_delta else "the table's first batch")
        kind = _TABLE_KIND.get(self.table_format or "", "table")
        message = (
            f"{what} does not fit the schema of {kind} {self.storage.root_uri} (schema in {source}): "
            + "; ".join(m.summary() for m in mismatches[:8])
            + ("; ..." if len(mismatches) > 8 else "")
            + ". Nothing was written.\n"
            + side_by_side(mismatches)
            + "\nTo write it: "
            + advice(mismatches, table_format=self.table_format)
            + "."
        )
        # a Delta table's (also when it is an Iceberg table too), an Iceberg table's, or the plain one
        cls = DeltaSchemaMismatchError if self.is_delta else IcebergSchemaMismatchError if self.table_format else SchemaMismatchError
        return cls(
            message,
            table=self.storage.root_uri,
            mismatches=[m.to_json() for m in mismatches],
            problems=[m.summary() for m in mismatches],
        )


#: how an error names the table, by its table format
_TABLE_KIND = {"delta": "Delta table", "iceberg": "Iceberg table", "delta+iceberg": "Delta and Iceberg table"}


def table_format_of(*, delta: bool, iceberg: bool) -> str | None:
    """The ``table_format`` of a table published to Delta and/or Iceberg (None: neither)."""
    return "+".join(name for name, on in (("delta", delta), ("iceberg", iceberg)) if on) or None


def with_partition_columns(schema: str, batch_schema: str, partition_by: Sequence[str]) -> str:
    """``schema`` (of files, which hold no partition columns) with the batch's partition columns
    appended: their values are directory names, typed as the stream types them."""
    fields = fields_of(schema)
    names = {f["name"] for f in fields}
    return struct_json(fields + [f for f in fields_of(batch_schema) if f["name"] in partition_by and f["name"] not in names])


def _newest_recorded_schema(commits: CommitsLog, latest: int, first_batch_id: int) -> str | None:
    """The schema the newest commit records (at most a few batches below ``latest``) hold."""
    for batch_id in range(latest, max(first_batch_id, latest - 3) - 1, -1):
        record = commits.record(batch_id)
        if record is not None and record.schema:
            try:
                fields_of(record.schema)
            except ValueError:
                continue
            return record.schema
    return None


def read_only_schema(storage: Storage, *, evolution: str = "none", file_format: str = "parquet", table_format: str | None = None) -> TableSchema:
    """The schema a writer of the table would load, read without its lease - nothing is written
    (no adoption, no clean-up): for checks before a writer holds the table (``start`` under
    Spark Connect). A table without a record gets its newest commit record's schema, or its
    Delta log's; a table without either, none (its first batch sets it)."""
    guard = TableSchema(storage, evolution=evolution, file_format=file_format, table_format=table_format)
    identity = read_identity(storage)
    if identity is None or identity.kind == "group":
        return guard
    latest = open_manifest(storage, identity).latest_batch_id(refresh=True)
    if latest is not None:
        guard.latest = latest
        guard.current = schema_as_of(storage, latest)
        if guard.current is None:
            guard.base = _newest_recorded_schema(CommitsLog(storage, interval=identity.compact_interval), latest, identity.first_batch_id)
    elif identity.delta_app_id is not None:
        from ..delta.target import DeltaTarget

        target = DeltaTarget(storage, identity.delta_app_id)
        guard.base, guard.delta_log = target.schema_json(), target.log_uri
    return guard
