"""The options of the sinks, validated once when a sink is built, grouped by concern.

``SinkOptions`` holds what every table of a sink is written and committed with (both sinks
take these); ``GroupOptions`` what only ``DatasetSink`` has: how a batch is split into tables
(``dataset_column``, ``outputs``), its quality gates (``checks``) and the commit ``policy``.

Every option is keyword-only on the sinks, with the same name here - the public name, with
``_ms`` appended where a duration was parsed into milliseconds (``retention="7d"`` becomes
``retention_ms``). Durations accept ``"30s"``, ``"10m"``, ``"500ms"`` or seconds as a number.

``format="delta"`` writes Parquet data files and makes each batch one Delta commit too
(``commit.table_steps.format_step``); its options: ``spark_manifest`` (default true: keep publishing
``_spark_metadata`` for Spark's file-source readers), ``delta_checkpoint_interval`` (a Delta
checkpoint every N versions, default 10) and ``delta_log_retention`` (how long Delta keeps log
entries, i.e. how far back Delta time travel reaches; default Delta's 30 days). The last two
are table properties, set when the first batch creates the Delta table.

``format="iceberg"`` writes Parquet data files and makes each batch one Iceberg snapshot
(``commit.table_steps.format_step``); its options: ``spark_manifest``, ``iceberg_catalog`` and
``iceberg_table`` (a pyiceberg catalog recording the table; default: the table's own metadata
files, found by path), ``iceberg_catalog_properties`` (that catalog's properties, at run time
only) and ``iceberg_snapshots_to_keep`` (snapshot expiry in each commit). ``format=["delta",
"iceberg"]`` (canonical spelling ``"delta+iceberg"``) publishes every batch to both.

``schema_evolution`` says what a batch may change in the table's schema, which every batch is
checked against before anything of it is written (``commit.table_schema``): ``none`` (default),
``add_columns`` (new columns are added, nullable) or ``add_and_widen`` (also wider types:
integer to long, float to double; not for Delta tables). See ``docs/schema.md``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import extras
from ..commit.committer import CommitterOptions
from ..commit.rewrites.compaction_consumers import DEFAULT_MAX_FILE_AGE_MS, Consumer
from ..commit.rewrites.data_compaction import CompactionPolicy
from ..config import parse_bool, parse_choice, parse_duration_ms, parse_int, parse_size, parse_table_text, reject_unknown
from ..delta.target import DeltaSettings
from ..errors import ConfigError
from ..iceberg.files import ICEBERG_TIMESTAMPS, OUTPUT_TIMESTAMP_TYPE
from ..iceberg.settings import IcebergCatalogRef, IcebergSettings
from ..log.compaction import interval_is_spark_safe
from ..observability.settings import LineageSettings, MetricsSettings, lineage_settings, metrics_settings
from ..storage.base import Storage
from ..table.schema_rules import EVOLUTION_MODES, EVOLVING_FORMATS
from .arrow_file_writer import EXTENSIONS
from .checks import Check
from .keywords import Duration, GroupKeywords, OnCommit, SinkKeywords, StagingMode, declared
from .outputs import Output, resolve_outputs

__all__ = ["Duration", "GroupOptions", "OnCommit", "SinkOptions", "StagingMode", "default_staging_mode"]


#: Table formats (a log of their own over Parquet files), in the order their steps run.
TABLE_FORMATS = ("delta", "iceberg")
FORMATS = ("parquet", "json", "csv", "orc", "text", "avro", *TABLE_FORMATS, "delta+iceberg")
STAGING_MODES = ("rename", "direct")
#: What the library's own Arrow file writer (``direct`` staging, dataset groups) can write: its
#: file formats, and the table formats, whose files are Parquet.
DIRECT_FORMATS = (*EXTENSIONS, *TABLE_FORMATS, "delta+iceberg")
#: the formats whose files compaction rewrites (Parquet: a table format's files are too)
COMPACTED_FORMATS = ("parquet", *TABLE_FORMATS, "delta+iceberg")
#: Options that mean something only with ``format="delta"``.
DELTA_ONLY = ("delta_checkpoint_interval", "delta_log_retention_ms")
#: Options that mean something only with ``format="iceberg"``.
ICEBERG_ONLY = ("iceberg_catalog", "iceberg_table", "iceberg_catalog_properties", "iceberg_snapshots_to_keep")


def table_formats(format: str) -> tuple[str, ...]:
    """The table formats of a ``format`` value (``"delta+iceberg"`` -> both; ``"parquet"`` -> none)."""
    return tuple(f for f in TABLE_FORMATS if f in format.split("+"))


def format_name(value: Any) -> str:
    """``format`` as given (a name, or a list of table formats) in its one canonical spelling:
    lower case, as Spark's ``format()`` takes any case (``"Delta"`` is ``"delta"``)."""
    if isinstance(value, str) and "+" not in value:
        return value.lower()
    names = value.split("+") if isinstance(value, str) else list(value) if isinstance(value, Iterable) else [value]
    names = [n.lower() if isinstance(n, str) else n for n in names]
    if len(names) == 1 and isinstance(names[0], str):
        return names[0]
    unknown = [n for n in names if n not in TABLE_FORMATS]
    if unknown or len(set(names)) != len(names) or not names:
        raise ConfigError(
            f"format takes one name, or a list of the table formats {list(TABLE_FORMATS)} (each batch published to every one), not {value!r}",
            key="format",
        )
    return "+".join(f for f in TABLE_FORMATS if f in names)


def check_evolving_format(evolution: str, format: str) -> None:
    """``schema_evolution`` other than ``none`` needs files that carry their schema."""
    if evolution != "none" and format not in EVOLVING_FORMATS:
        raise ConfigError(
            f"schema_evolution={evolution!r} needs a format whose files carry their schema ({', '.join(EVOLVING_FORMATS)}); "
            f"{format} files are read by position or were not verified with added columns. Keep schema_evolution='none' "
            "(batches must then have the table's columns), or write parquet.",
            key="schema_evolution",
        )


def default_staging_mode(storage: Storage) -> StagingMode:
    """How a table on ``storage`` stages its files unless ``staging_mode`` says otherwise:
    ``rename`` where a rename is one atomic metadata operation (local disk, HDFS-like), else
    ``direct`` (object stores, where a rename is a copy and a delete)."""
    return "rename" if storage.rename_is_atomic else "direct"


def _names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


COMPACTION_KEYS = ("target_size", "min_files", "min_age", "max_bytes", "quiet_period", "consumers")


def compaction_consumers(value: Any) -> tuple[Consumer, ...]:
    """``compaction.consumers``: checkpoint locations of downstream file-source queries, as a
    list (each with Spark's default ``maxFileAge``) or a mapping of location to ``maxFileAge``."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        pairs = [(str(k), parse_duration_ms(v, key="compaction.consumers")) for k, v in value.items()]
    elif isinstance(value, Iterable):
        pairs = [(str(k), DEFAULT_MAX_FILE_AGE_MS) for k in value]
    else:
        raise ConfigError(f"compaction.consumers takes checkpoint locations, or a mapping of them to maxFileAge; got {value!r}", key="compaction")
    if any(not k for k, _ in pairs):
        raise ConfigError("compaction.consumers names an empty checkpoint location", key="compaction")
    return tuple(Consumer(k, age) for k, age in pairs)


def compaction_policy(value: Any) -> CompactionPolicy | None:
    """The ``compaction`` option: None, a bool, or a mapping of ``COMPACTION_KEYS`` (from a job
    config's environment also ``"true"`` or ``"target_size=64MB,min_files=4"``)."""
    if isinstance(value, str):
        value = parse_table_text(value) if "=" in value else parse_bool(value, key="compaction")
    if value is None or value is False:
        return None
    if value is True:
        return CompactionPolicy()
    if not isinstance(value, Mapping):
        raise ConfigError(f"compaction takes True, False or a mapping of {', '.join(COMPACTION_KEYS)}; got {value!r}", key="compaction")
    reject_unknown(value, COMPACTION_KEYS, where="the compaction option")
    target = parse_size(value.get("target_size", "128MB"), key="compaction.target_size")
    if target < 1 << 10:
        raise ConfigError(f"compaction.target_size must be at least 1KB, got {target} bytes", key="compaction")
    return CompactionPolicy(
        target_size=target,
        min_files=parse_int(value.get("min_files", 8), key="compaction.min_files", minimum=2),
        min_age_ms=parse_duration_ms(value.get("min_age", "8 days"), key="compaction.min_age"),
        max_bytes=parse_size(value.get("max_bytes", target), key="compaction.max_bytes"),
        quiet_period_ms=parse_duration_ms(value.get("quiet_period", "0s"), key="compaction.quiet_period"),
        consumers=compaction_consumers(value.get("consumers")),
    )


def _offset_columns(value: Iterable[str]) -> tuple[str, str, str]:
    names = _names(value)
    if len(names) != 3 or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"offset_columns names three columns (topic, partition, offset), got {value!r}", key="offset_columns")
    return names[0], names[1], names[2]


@dataclass(frozen=True)
class SinkOptions:
    """What every table of a sink is written and committed with (``ExactlyOnceSink`` and
    ``DatasetSink`` both take these; see ``ExactlyOnceSink`` for each option)."""

    format: str = "parquet"
    partition_by: tuple[str, ...] = ()
    writer_options: Mapping[str, str] = field(default_factory=dict)
    staging_mode: StagingMode | None = None  # None: default_staging_mode(storage)
    checkpoint_location: str | None = None
    query_id: str | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    compact_interval: int = 10
    spark_reader_compact_interval: int = 10
    min_batches_to_retain: int = 100
    cleanup_delay_ms: int = 600_000
    retention_ms: int | None = None
    source_retention_ms: int | None = None
    watermark_columns: tuple[str, ...] = ()
    lease_timeout_ms: int = 60_000
    #: Spark Connect only: how long a query's first batch waits for a live writer on the same
    #: host to let the table go (the server ends the previous query's worker asynchronously).
    connect_handover_wait_ms: int = 60_000
    move_threads: int = 8
    worker_moves_from: int = 5_000
    step_retries: int = 3
    description: str = ""
    on_commit: OnCommit | None = None
    #: ``"module:callable"``: the table's storage is ``callable(storage)``, built in the process
    #: that writes the table (a Spark Connect server's worker too, which imports the module).
    #: An extension point like Spark's ``checkpointFileManagerClass``; the test suite uses it
    #: to inject faults (``streaming_exactly_once.testing.faults``).
    storage_wrapper: str | None = None
    progress_metrics: bool = True  # ``start`` observes rows and watermarks into query progress
    #: a partitioned source (Kafka) starting after the records the table holds: skip them (else refused)
    allow_offset_gaps: bool = False
    #: "record": every batch publishes its ledger; "enforce": also refuses a batch breaking its invariants
    audit: str = "record"
    #: the batch's columns naming each row's source partition and offset (Kafka's names)
    offset_columns: tuple[str, str, str] = ("topic", "partition", "offset")
    #: the columns compared with the table's record at a re-read offset (``sink.record_probe``); () all
    record_columns: tuple[str, ...] = ()
    # format="delta" or "iceberg" only
    spark_manifest: bool = True
    # format="delta" only
    delta_checkpoint_interval: int = 10
    delta_log_retention_ms: int | None = None
    # format="iceberg" only
    iceberg_catalog: str | None = None
    iceberg_table: str | None = None
    iceberg_catalog_properties: Mapping[str, str] | None = None
    iceberg_snapshots_to_keep: int | None = None
    #: what a batch may change in the table's schema (``table.schema_rules.EVOLUTION_MODES``)
    schema_evolution: str = "none"
    #: small files rewritten by compaction batches (``commit.rewrites.data_compaction``); None: off
    compaction: CompactionPolicy | None = None
    #: a new table's directory that holds Parquet files: its first batch adopts them (``commit.adoption``)
    adopt_existing_files: bool = False
    #: where the metrics are exported (``observability``); None: off
    metrics: MetricsSettings | None = None
    #: how OpenLineage events are sent (``observability``); None: off
    lineage: LineageSettings | None = None

    @classmethod
    def build(cls, given: Mapping[str, Any], *, stacklevel: int = 3) -> SinkOptions:
        """The options from a sink's keyword arguments (``sink.keywords`` declares each one, its
        default and how it is read): durations parsed into milliseconds, sequences normalised,
        every value validated (``ConfigError``). ``options`` is the deprecated name of
        ``writer_options``."""
        values = {d.name: given.get(d.name, d.option.default) for d in declared(SinkKeywords)}
        legacy = values.pop("options")
        if legacy is not None:
            warnings.warn(
                "the sink option 'options' is now called 'writer_options' (Spark writer options such as "
                "compression or header); 'options' will be removed",
                DeprecationWarning,
                stacklevel=stacklevel,  # the caller of the sink
            )
            if values["writer_options"] is not None:
                raise ConfigError("give writer_options only ('options' is its deprecated name), not both", key="options")
            values["writer_options"] = legacy
        stored: dict[str, Any] = {}
        for d in declared(SinkKeywords):
            if d.name in values:
                value = values[d.name]
                if d.option.duration:
                    stored[f"{d.name}_ms"] = None if value is None else parse_duration_ms(value, key=d.name)
                else:
                    stored[d.name] = value
        stored["format"] = format_name(stored["format"])
        stored["partition_by"] = _names(stored["partition_by"])
        stored["watermark_columns"] = _names(stored["watermark_columns"])
        stored["writer_options"] = dict(stored["writer_options"] or {})
        stored["storage_options"] = dict(stored["storage_options"] or {})
        stored["offset_columns"] = _offset_columns(stored["offset_columns"])
        stored["record_columns"] = _names(stored["record_columns"])
        stored["compaction"] = compaction_policy(stored["compaction"])
        stored["metrics"] = metrics_settings(stored["metrics"])
        stored["lineage"] = lineage_settings(stored["lineage"])
        opts = cls(**stored)
        opts.validate()
        return opts

    def validate(self) -> None:
        parse_choice(self.format, key="format", choices=FORMATS)
        if self.staging_mode is not None:
            parse_choice(self.staging_mode, key="staging_mode", choices=STAGING_MODES)
            if self.staging_mode == "direct" and self.format not in DIRECT_FORMATS:
                raise ConfigError(
                    f"staging_mode='direct' writes {', '.join(DIRECT_FORMATS)} only; format {self.format!r} needs staging_mode='rename'.",
                    key="staging_mode",
                )
        parse_int(self.compact_interval, key="compact_interval", minimum=1)
        if self.storage_wrapper is not None and (not isinstance(self.storage_wrapper, str) or self.storage_wrapper.count(":") != 1):
            raise ConfigError(f"storage_wrapper must be 'module:callable', not {self.storage_wrapper!r}", key="storage_wrapper")
        if not interval_is_spark_safe(self.compact_interval, self.spark_reader_compact_interval):
            raise ConfigError(
                f"compact_interval={self.compact_interval} would be misread by Spark readers: Spark derives the "
                "interval from .compact file names and, with its default "
                f"spark.sql.streaming.fileSink.log.compactInterval={self.spark_reader_compact_interval}, only "
                f"intervals 1..{self.spark_reader_compact_interval} derive correctly. Use a smaller interval, or "
                "raise spark_reader_compact_interval if every reader sets that Spark conf.",
                key="compact_interval",
            )
        parse_int(self.min_batches_to_retain, key="min_batches_to_retain", minimum=1)
        parse_int(self.move_threads, key="move_threads", minimum=1, maximum=256)
        parse_int(self.worker_moves_from, key="worker_moves_from", minimum=1)
        parse_int(self.step_retries, key="step_retries", minimum=0, maximum=20)
        if self.lease_timeout_ms < 1000:
            raise ConfigError(f"lease_timeout must be at least 1s, got {self.lease_timeout_ms} ms", key="lease_timeout")
        if self.connect_handover_wait_ms < 0:
            raise ConfigError("connect_handover_wait cannot be negative", key="connect_handover_wait")
        dupes = [c for c in self.partition_by if list(self.partition_by).count(c) > 1]
        if dupes:
            raise ConfigError(f"partition_by lists {dupes[0]!r} twice", key="partition_by")
        if not isinstance(self.adopt_existing_files, bool):
            raise ConfigError(f"adopt_existing_files must be true or false, got {self.adopt_existing_files!r}", key="adopt_existing_files")
        if self.adopt_existing_files and self.file_format != "parquet":
            raise ConfigError(
                f"adopt_existing_files adopts Parquet files (their footers say what they hold); format={self.format!r} "
                "tables hold other files. Write the table to an empty directory, or convert the files to Parquet first.",
                key="adopt_existing_files",
            )
        if not isinstance(self.allow_offset_gaps, bool):
            raise ConfigError(f"allow_offset_gaps must be true or false, got {self.allow_offset_gaps!r}", key="allow_offset_gaps")
        if self.on_commit is not None and not callable(self.on_commit):
            raise ConfigError("on_commit must be a callable taking one dict", key="on_commit")
        parse_choice(self.schema_evolution, key="schema_evolution", choices=EVOLUTION_MODES)
        parse_choice(self.audit, key="audit", choices=("record", "enforce"))
        check_evolving_format(self.schema_evolution, self.format)
        self._check_timestamp_layout()
        if self.compaction is not None and self.compaction.consumers and not self.spark_manifest:
            raise ConfigError(
                "compaction.consumers are downstream file-source queries, which read a table through its _spark_metadata; "
                "with spark_manifest=False they would list the directory itself and read every rewritten file again. "
                "Read such a table with a Delta or Iceberg reader, or keep spark_manifest=True.",
                key="compaction",
            )
        if self.compaction is not None and self.format not in COMPACTED_FORMATS:
            raise ConfigError(
                f"compaction rewrites Parquet files, of parquet, Delta and Iceberg tables; this sink writes "
                f"format={self.format!r}. Turn compaction off, or write parquet.",
                key="compaction",
            )

    def _check_timestamp_layout(self) -> None:
        """An Iceberg table's files store timestamps as Iceberg does (``spark_writer_options``):
        a writer option asking Spark for another layout is refused, not silently overridden."""
        if "iceberg" not in self.table_formats:
            return
        for key, value in self.writer_options.items():
            if str(key).lower() == OUTPUT_TIMESTAMP_TYPE.lower() and str(value).upper() != ICEBERG_TIMESTAMPS:
                raise ConfigError(
                    f"writer_options sets {key}={value}, but an Iceberg table's data files store timestamps as "
                    f"{ICEBERG_TIMESTAMPS} (INT64 microseconds: Iceberg readers read nothing else as timestamps). Leave it "
                    "out: the sink writes the table's files that way whatever the session's setting.",
                    key="writer_options",
                )

    def spark_writer_options(self) -> dict[str, str]:
        """The options Spark's writer gets (``staging_mode='rename'``): ``writer_options``, and for an
        Iceberg table ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS`` - a writer option of
        this write only, the session's setting (Spark's default INT96) untouched."""
        options = {str(k): str(v) for k, v in self.writer_options.items()}
        if "iceberg" in self.table_formats and not any(k.lower() == OUTPUT_TIMESTAMP_TYPE.lower() for k in options):
            options[OUTPUT_TIMESTAMP_TYPE] = ICEBERG_TIMESTAMPS
        return options

    @property
    def table_formats(self) -> tuple[str, ...]:
        """The table formats each batch is also published to (``delta``, ``iceberg``)."""
        return table_formats(self.format)

    def validate_table_formats(self, formats: Iterable[str]) -> None:
        """Refuse the options of a table format none of the sink's tables is written in
        (``formats``: those its tables use), and check those of the formats they are. A format
        whose extra is not installed is refused first (``MissingDependencyError``)."""
        formats = set(formats)
        for name in sorted(formats):
            extras.require(name)
        for name, only in (("delta", DELTA_ONLY), ("iceberg", ICEBERG_ONLY), ("delta' or 'iceberg", ("spark_manifest",))):
            if any(f in formats for f in name.split("' or '")):
                continue
            given = [k for k in only if getattr(self, k) != SinkOptions.__dataclass_fields__[k].default]
            if given:
                raise ConfigError(
                    f"{given[0].removesuffix('_ms')} applies to format='{name}' tables only; this sink writes format={self.format!r}",
                    key=given[0].removesuffix("_ms"),
                )
        if "delta" in formats:
            self.validate_delta()
        if "iceberg" in formats:
            self.validate_iceberg()
        elif not isinstance(self.spark_manifest, bool):
            raise ConfigError(f"spark_manifest must be true or false, got {self.spark_manifest!r}", key="spark_manifest")

    def validate_iceberg(self) -> None:
        if not isinstance(self.spark_manifest, bool):
            raise ConfigError(f"spark_manifest must be true or false, got {self.spark_manifest!r}", key="spark_manifest")
        if (self.iceberg_catalog is None) != (self.iceberg_table is None):
            raise ConfigError(
                "iceberg_catalog and iceberg_table go together: the catalog recording the table, and the table's name in it "
                "('namespace.table'); give both, or neither for the table's own metadata files (found by path)",
                key="iceberg_table" if self.iceberg_table is None else "iceberg_catalog",
            )
        if self.iceberg_table is not None and (not isinstance(self.iceberg_table, str) or "." not in self.iceberg_table.strip(".")):
            raise ConfigError(f"iceberg_table is 'namespace.table', not {self.iceberg_table!r}", key="iceberg_table")
        if self.iceberg_catalog_properties is not None and self.iceberg_catalog is None:
            raise ConfigError(
                "iceberg_catalog_properties are the properties of iceberg_catalog, which is not given", key="iceberg_catalog_properties"
            )
        if self.iceberg_snapshots_to_keep is not None:
            parse_int(self.iceberg_snapshots_to_keep, key="iceberg_snapshots_to_keep", minimum=1)
        if self.schema_evolution == "add_and_widen":
            raise ConfigError(
                "schema_evolution='add_and_widen' does not apply to format='iceberg': its type promotions are not managed by "
                "this library. Use schema_evolution='add_columns'.",
                key="schema_evolution",
            )

    def validate_delta(self) -> None:
        """Check the ``format="delta"`` options."""
        if not isinstance(self.spark_manifest, bool):
            raise ConfigError(f"spark_manifest must be true or false, got {self.spark_manifest!r}", key="spark_manifest")
        parse_int(self.delta_checkpoint_interval, key="delta_checkpoint_interval", minimum=1)
        if self.schema_evolution == "add_and_widen":
            raise ConfigError(
                "schema_evolution='add_and_widen' does not apply to format='delta': Delta widens a column's type only with "
                "its typeWidening table feature, which this library does not manage. Use schema_evolution='add_columns'.",
                key="schema_evolution",
            )
        if self.delta_log_retention_ms is not None and self.delta_log_retention_ms < 1000:
            raise ConfigError(f"delta_log_retention must be at least 1s, got {self.delta_log_retention_ms} ms", key="delta_log_retention")

    @property
    def file_format(self) -> str:
        """The format of the data files (a Delta or Iceberg table's files are Parquet)."""
        return "parquet" if self.table_formats else self.format

    def delta_settings(self) -> DeltaSettings | None:
        if "delta" not in self.table_formats:
            return None
        return DeltaSettings(checkpoint_interval=self.delta_checkpoint_interval, log_retention_ms=self.delta_log_retention_ms)

    def iceberg_settings(self) -> IcebergSettings | None:
        if "iceberg" not in self.table_formats:
            return None
        return IcebergSettings(snapshots_to_keep=self.iceberg_snapshots_to_keep)

    def iceberg_catalog_ref(self) -> IcebergCatalogRef:
        return IcebergCatalogRef(self.iceberg_catalog, self.iceberg_table)

    def committer_options(self) -> CommitterOptions:
        return CommitterOptions(
            format=self.file_format,
            delta=self.delta_settings(),
            iceberg=self.iceberg_settings(),
            iceberg_catalog=self.iceberg_catalog_ref(),
            iceberg_catalog_properties=tuple(sorted((str(k), str(v)) for k, v in (self.iceberg_catalog_properties or {}).items())),
            spark_manifest=self.spark_manifest,
            partition_by=self.partition_by,
            compact_interval=self.compact_interval,
            min_batches_to_retain=self.min_batches_to_retain,
            cleanup_delay_ms=self.cleanup_delay_ms,
            retention_ms=self.retention_ms,
            source_retention_ms=self.source_retention_ms,
            lease_timeout_ms=self.lease_timeout_ms,
            heartbeat=True,
            move_threads=self.move_threads,
            worker_moves_from=self.worker_moves_from,
            step_retries=self.step_retries,
            description=self.description,
            writer_options=tuple(sorted((str(k), str(v)) for k, v in self.writer_options.items())),
            schema_evolution=self.schema_evolution,
            compaction=self.compaction,
            adopt_existing_files=self.adopt_existing_files,
            audit=self.audit,
        )


@dataclass(frozen=True)
class GroupOptions:
    """What only ``DatasetSink`` has: how a batch becomes tables, its gates and its policy."""

    dataset_column: str | None = None
    outputs: tuple[Output, ...] = ()
    checks: tuple[Check, ...] = ()
    policy: Literal["full", "partial"] = "full"

    @classmethod
    def build(cls, given: Mapping[str, Any]) -> GroupOptions:
        """The options from ``DatasetSink``'s keyword arguments, validated (``ConfigError``)."""
        values = {d.name: given.get(d.name, d.option.default) for d in declared(GroupKeywords, own=True)}
        opts = cls(
            dataset_column=values["dataset_column"],
            outputs=tuple(values["outputs"] or ()),
            checks=tuple(values["checks"] or ()),
            policy=values["policy"],
        )
        opts.validate()
        return opts

    def validate(self) -> None:
        for output in self.outputs:
            if not isinstance(output, Output):
                raise ConfigError(f"outputs takes Output objects (Output('name', ...)), got {output!r}", key="outputs")
        for check in self.checks:
            if not isinstance(check, Check):
                raise ConfigError(f"checks takes Check objects (Check.row(...), Check.rows_between(...)), got {check!r}", key="checks")
        parse_choice(self.policy, key="policy", choices=("full", "partial"))

    def resolved_outputs(self) -> tuple[Output, ...]:
        """The outputs: the explicit ones, or one split by ``dataset_column``."""
        return resolve_outputs(outputs=self.outputs, dataset_column=self.dataset_column)
