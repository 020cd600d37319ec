"""All options of ``ExactlyOnceSink``, validated once when the sink is built.

Every option is keyword-only on the sink; durations accept ``"30s"``, ``"10m"``, ``"500ms"``
or seconds as a number.

``format="delta"`` writes Parquet data files and makes each batch one Delta commit too
(``commit.delta_step``); its options: ``spark_manifest`` (default true: keep publishing
``_spark_metadata`` for Spark's file-source readers), ``delta_checkpoint_interval`` (a Delta
checkpoint every N versions, default 10) and ``delta_log_retention`` (how long Delta keeps log
entries, i.e. how far back Delta time travel reaches; default Delta's 30 days). The last two
are table properties, set when the first batch creates the Delta table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..commit.committer import CommitterOptions
from ..config import parse_choice, parse_duration_ms, parse_int
from ..delta.target import DeltaSettings
from ..errors import ConfigError
from ..log.compaction import interval_is_spark_safe
from .arrow_file_writer import EXTENSIONS

FORMATS = ("parquet", "json", "csv", "orc", "text", "avro", "delta")
STAGING_MODES = ("rename", "direct")
#: What the library's own Arrow file writer (``direct`` staging, dataset groups) can write: its
#: file formats, and Delta tables, whose files are Parquet.
DIRECT_FORMATS = (*EXTENSIONS, "delta")
#: Options that mean something only with ``format="delta"``.
DELTA_ONLY = ("spark_manifest", "delta_checkpoint_interval", "delta_log_retention_ms")


@dataclass(frozen=True)
class SinkOptions:
    format: str = "parquet"
    partition_by: tuple[str, ...] = ()
    writer_options: Mapping[str, str] = field(default_factory=dict)
    staging_mode: str | None = None  # None: rename on local/HDFS-like storage, direct on object stores
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
    on_commit: Callable[[dict[str, Any]], None] | None = None
    #: ``"module:callable"``: the table's storage is ``callable(storage)``, built in the process
    #: that writes the table (a Spark Connect server's worker too, which imports the module).
    #: An extension point like Spark's ``checkpointFileManagerClass``; the test suite uses it
    #: to inject faults (``streaming_exactly_once.testing.faults``).
    storage_wrapper: str | None = None
    progress_metrics: bool = True  # ``start`` observes rows and watermarks into query progress
    # format="delta" only
    spark_manifest: bool = True
    delta_checkpoint_interval: int = 10
    delta_log_retention_ms: int | None = None
    # dataset groups (DatasetSink) only
    dataset_column: str | None = None
    outputs: tuple[Any, ...] = ()  # sink.outputs.Output
    checks: tuple[Any, ...] = ()  # sink.checks.Check
    policy: str = "full"

    GROUP_ONLY: ClassVar[tuple[str, ...]] = ("dataset_column", "outputs", "checks")

    def reject_group_options(self, sink: str) -> None:
        given = [k for k in self.GROUP_ONLY if getattr(self, k)] + (["policy"] if self.policy != "full" else [])
        if given:
            raise ConfigError(
                f"{', '.join(given)} belong to DatasetSink (several tables, quality gates); {sink} writes one "
                "table. Use DatasetSink(root, ...), which also takes a single output.",
                key=given[0],
            )

    @classmethod
    def build(cls, **kwargs: Any) -> SinkOptions:
        valid = set(cls.__dataclass_fields__) | {
            "cleanup_delay", "retention", "source_retention", "lease_timeout", "connect_handover_wait", "options",
            "delta_log_retention",
        }
        unknown = sorted(set(kwargs) - valid)
        if unknown:
            raise ConfigError(
                f"Unknown ExactlyOnceSink option(s) {', '.join(unknown)}. Valid options: "
                + ", ".join(sorted(valid - {
                    "writer_options", "cleanup_delay_ms", "retention_ms", "source_retention_ms", "lease_timeout_ms",
                    "connect_handover_wait_ms", "delta_log_retention_ms",
                })),
                unknown=unknown,
            )
        values = dict(kwargs)
        if "options" in values:
            values["writer_options"] = values.pop("options") or {}
        for text_key, ms_key in (
            ("cleanup_delay", "cleanup_delay_ms"),
            ("retention", "retention_ms"),
            ("source_retention", "source_retention_ms"),
            ("lease_timeout", "lease_timeout_ms"),
            ("connect_handover_wait", "connect_handover_wait_ms"),
            ("delta_log_retention", "delta_log_retention_ms"),
        ):
            if text_key in values:
                raw = values.pop(text_key)
                values[ms_key] = None if raw is None else parse_duration_ms(raw, key=text_key)
        if isinstance(values.get("partition_by"), str):
            values["partition_by"] = (values["partition_by"],)
        if isinstance(values.get("watermark_columns"), str):
            values["watermark_columns"] = (values["watermark_columns"],)
        for key in ("partition_by", "watermark_columns"):
            if key in values:
                values[key] = tuple(values[key] or ())
        for key in ("outputs", "checks"):
            if key in values:
                values[key] = tuple(values[key] or ())
        for key in ("writer_options", "storage_options"):
            if key in values:
                values[key] = dict(values[key] or {})
        opts = cls(**values)
        opts.validate()
        return opts

    def validate(self) -> None:
        parse_choice(self.format, key="format", choices=FORMATS)
        if self.staging_mode is not None:
            parse_choice(self.staging_mode, key="staging_mode", choices=STAGING_MODES)
            if self.staging_mode == "direct" and self.format not in DIRECT_FORMATS:
                raise ConfigError(
                    f"staging_mode='direct' writes {', '.join(DIRECT_FORMATS)} only; format {self.format!r} needs "
                    "staging_mode='rename'.",
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
        self._validate_delta()
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
        parse_choice(self.policy, key="policy", choices=("full", "partial"))
        if self.on_commit is not None and not callable(self.on_commit):
            raise ConfigError("on_commit must be a callable taking one dict", key="on_commit")

    def _validate_delta(self) -> None:
        any_delta = self.format == "delta" or any(getattr(o, "format", None) == "delta" for o in self.outputs)
        if not any_delta:
            given = [k for k in DELTA_ONLY if getattr(self, k) != SinkOptions.__dataclass_fields__[k].default]
            if given:
                raise ConfigError(f"{given[0]} applies to format='delta' tables only; this sink writes format={self.format!r}", key=given[0])
            return
        if not isinstance(self.spark_manifest, bool):
            raise ConfigError(f"spark_manifest must be true or false, got {self.spark_manifest!r}", key="spark_manifest")
        parse_int(self.delta_checkpoint_interval, key="delta_checkpoint_interval", minimum=1)
        if self.delta_log_retention_ms is not None and self.delta_log_retention_ms < 1000:
            raise ConfigError(f"delta_log_retention must be at least 1s, got {self.delta_log_retention_ms} ms", key="delta_log_retention")

    @property
    def file_format(self) -> str:
        """The format of the data files (a Delta table's files are Parquet)."""
        return "parquet" if self.format == "delta" else self.format

    def delta_settings(self) -> DeltaSettings | None:
        if self.format != "delta":
            return None
        return DeltaSettings(checkpoint_interval=self.delta_checkpoint_interval, log_retention_ms=self.delta_log_retention_ms)

    def committer_options(self) -> CommitterOptions:
        return CommitterOptions(
            format=self.file_format,
            delta=self.delta_settings(),
            spark_manifest=self.spark_manifest,
            partition_by=self.partition_by,
            compact_interval=self.compact_interval,
            min_batches_to_retain=self.min_batches_to_retain,
            cleanup_delay_ms=self.cleanup_delay_ms,
            manifest_retention_ms=self.retention_ms,
            sources_retention_ms=self.source_retention_ms,
            lease_timeout_ms=self.lease_timeout_ms,
            heartbeat=True,
            move_threads=self.move_threads,
            worker_moves_from=self.worker_moves_from,
            step_retries=self.step_retries,
            description=self.description,
            writer_options=tuple(sorted((str(k), str(v)) for k, v in self.writer_options.items())),
        )
