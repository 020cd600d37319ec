"""Every sink option, declared once: its name, public type, default and meaning.

The sinks' signatures (``**options: Unpack[SinkKeywords]``, so IDEs and mypy check names and
types; ``inspect.signature`` and ``help()`` list each one), ``SinkOptions.build`` (defaults and
parsing), the job config's ``[sink]`` keys and the documentation's options table all read these
declarations; nothing else lists the options. An option is a ``TypedDict`` key whose type is
``Annotated[<public type>, Option(...)]``.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal, TypedDict

from .checks import Check
from .outputs import Output

#: A duration: ``"500ms"``, ``"30s"``, ``"10m"``, ``"2h"``, ``"1d"``, Spark's ``"10 seconds"`` or
#: ``"1 hour 30 minutes"``, a ``datetime.timedelta`` or a number of seconds.
Duration = str | int | float | timedelta
StagingMode = Literal["rename", "direct"]
#: Called with one dict per committed batch (the ``batch_committed`` event).
OnCommit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Option:
    """How one option is given and read (``SinkOptions.build``)."""

    default: Any
    #: what it does, for ``help()`` and the documentation
    doc: str
    #: how a job config's ``[sink]`` section spells it (``config.load_job_config``); None: not there
    conf: str | None = None
    #: a duration: stored in milliseconds, as ``<name>_ms``
    duration: bool = False
    #: means something only with ``format="delta"``
    delta_only: bool = False


class SinkKeywords(TypedDict, total=False):
    """The options of every sink (``ExactlyOnceSink``; ``DatasetSink`` applies them to each table)."""

    format: Annotated[
        str | Iterable[str],
        Option(
            "parquet",
            "``parquet``, ``json``, ``csv``, ``orc``, ``text``, ``avro``, ``delta`` (Parquet files, and each batch "
            "one Delta commit with the transaction (table, batch)), ``iceberg`` (Parquet files, and each batch one Iceberg "
            'snapshot) or both table formats at once: ``["delta", "iceberg"]`` (also spelt ``"delta+iceberg"``).',
            conf="str",
        ),
    ]
    partition_by: Annotated[str | Iterable[str] | None, Option(None, "Partition columns (Hive-style ``k=v`` directories).", conf="list")]
    writer_options: Annotated[
        Mapping[str, str] | None,
        Option(
            None,
            "Spark writer options (``compression``, ``header``, ...); recorded in the table, so readers use them too.",
            conf="table",
        ),
    ]
    staging_mode: Annotated[
        StagingMode | None,
        Option(
            None,
            "``rename`` or ``direct``; by default ``rename`` where a rename is atomic (local disk, HDFS), ``direct`` on object stores.",
            conf="str",
        ),
    ]
    checkpoint_location: Annotated[
        str | None,
        Option(
            None,
            "The query's checkpoint (``start`` sets it): enables the offsets and input-file records that make a recreated checkpoint safe.",
        ),
    ]
    query_id: Annotated[str | None, Option(None, "Override the query id (default: Spark's persistent query id).")]
    storage_options: Annotated[
        Mapping[str, Any] | None,
        Option(
            None,
            "Passed to the storage backend (e.g. S3 endpoint and credentials; delta-rs' spellings are translated).",
        ),
    ]
    compact_interval: Annotated[int, Option(10, "A ``.compact`` manifest file every N batches (1..10: Spark-readable).", conf="int")]
    spark_reader_compact_interval: Annotated[
        int,
        Option(
            10,
            "The ``spark.sql.streaming.fileSink.log.compactInterval`` every Spark reader of the table uses; bounds ``compact_interval``.",
        ),
    ]
    min_batches_to_retain: Annotated[int, Option(100, "Manifest and log batches always kept (Spark's ``minBatchesToRetain``).", conf="int")]
    cleanup_delay: Annotated[
        Duration,
        Option(
            "10m",
            "How long superseded log files stay before they are deleted (Spark's ``fileSink.log.cleanupDelay``).",
            conf="duration",
            duration=True,
        ),
    ]
    retention: Annotated[
        Duration | None,
        Option(
            None,
            "Manifest entries older than this are dropped at compaction (Spark's ``retention``).",
            conf="duration",
            duration=True,
        ),
    ]
    source_retention: Annotated[
        Duration | None,
        Option(
            None,
            "Committed input files older than this are forgotten.",
            conf="duration",
            duration=True,
        ),
    ]
    watermark_columns: Annotated[str | Iterable[str] | None, Option(None, "Columns whose min/max is recorded per batch.", conf="list")]
    lease_timeout: Annotated[
        Duration,
        Option(
            "60s",
            "How long a silent writer keeps the table (at least 1s).",
            conf="duration",
            duration=True,
        ),
    ]
    connect_handover_wait: Annotated[
        Duration,
        Option(
            "60s",
            "Spark Connect only: how long a query's first batch waits for the previous query's writer on the same host to let the table go.",
            duration=True,
        ),
    ]
    move_threads: Annotated[int, Option(8, "Parallel renames in ``rename`` mode.", conf="int")]
    worker_moves_from: Annotated[
        int,
        Option(
            5_000,
            "A batch with at least this many files has its renames run as a Spark job on the workers.",
            conf="int",
        ),
    ]
    step_retries: Annotated[int, Option(3, "Bounded retries of a failing commit step.", conf="int")]
    description: Annotated[str, Option("", "Free text recorded with the table's lease (who writes it).", conf="str")]
    on_commit: Annotated[OnCommit | None, Option(None, "A callable receiving one dict per committed batch (metrics).")]
    storage_wrapper: Annotated[
        str | None,
        Option(
            None,
            '``"module:callable"``: the table\'s storage is ``callable(storage)``, built in the process that writes (a Spark '
            "Connect worker too); the test suite injects faults with it.",
        ),
    ]
    progress_metrics: Annotated[bool, Option(True, "``start`` observes rows and watermarks into the query's progress.")]
    allow_offset_gaps: Annotated[
        bool,
        Option(
            False,
            "A partitioned source (Kafka) whose query starts after the records the table holds skips them with a warning; "
            "by default the batch is refused (``OffsetGapError``).",
            conf="bool",
        ),
    ]
    audit: Annotated[
        Literal["record", "enforce"],
        Option(
            "record",
            "Every batch publishes its ledger (what it read, wrote and published) for ``seo audit``. ``enforce`` also checks "
            "the batch's own invariants before it is published (rows conserved, no file twice, offsets neither overlapping "
            "nor leaving an unrecorded gap, compaction keeping every row) and refuses one that breaks them "
            "(``AuditViolationError``, nothing published).",
            conf="str",
        ),
    ]
    offset_columns: Annotated[
        Iterable[str],
        Option(
            ("topic", "partition", "offset"),
            "The batch's columns naming each row's source topic, partition and offset, by which records the table holds are dropped.",
            conf="list",
        ),
    ]
    record_columns: Annotated[
        str | Iterable[str] | None,
        Option(
            None,
            "The columns that tell one record from another where a batch reads offsets the table holds records at (a "
            "topic deleted and recreated reuses its offsets): default every column but ``offset_columns``; name the "
            "source's own (key, value, timestamp) when others are computed anew on each run.",
            conf="list",
        ),
    ]
    spark_manifest: Annotated[
        bool,
        Option(
            True,
            '``format="delta"`` only: also publish ``_spark_metadata`` for Spark\'s file-source readers.',
            conf="bool",
            delta_only=True,
        ),
    ]
    delta_checkpoint_interval: Annotated[
        int,
        Option(
            10,
            '``format="delta"`` only: a Delta checkpoint every N versions (a table property the first batch sets).',
            conf="int",
            delta_only=True,
        ),
    ]
    delta_log_retention: Annotated[
        Duration | None,
        Option(
            None,
            '``format="delta"`` only: how long Delta keeps its log, so how far Delta time travel reaches (default Delta\'s '
            "30 days; a table property).",
            conf="duration",
            duration=True,
            delta_only=True,
        ),
    ]
    iceberg_catalog: Annotated[
        str | None,
        Option(
            None,
            '``format="iceberg"`` only: the pyiceberg catalog recording the table (REST, Glue, Hive, SQL), by name; its '
            "properties come from ``iceberg_catalog_properties`` or pyiceberg's configuration. Default: none - the table's own "
            "``metadata/`` files and ``version-hint.text``, found by path.",
            conf="str",
        ),
    ]
    iceberg_table: Annotated[
        str | None,
        Option(
            None,
            '``format="iceberg"`` with ``iceberg_catalog``: the table\'s name in that catalog, ``namespace.table``.',
            conf="str",
        ),
    ]
    iceberg_catalog_properties: Annotated[
        Mapping[str, str] | None,
        Option(
            None,
            '``format="iceberg"`` only: the properties ``pyiceberg.catalog.load_catalog`` takes (``uri``, ``warehouse``, '
            "credentials, ...); used at run time, never written to the table.",
            conf="table",
        ),
    ]
    iceberg_snapshots_to_keep: Annotated[
        int | None,
        Option(
            None,
            '``format="iceberg"`` only: keep this many newest snapshots; older ones are expired by the same Iceberg commit '
            "that adds a batch (the batch high-water mark survives expiry). Default: no expiry (Iceberg time travel to every batch).",
            conf="int",
        ),
    ]
    schema_evolution: Annotated[
        Literal["none", "add_columns", "add_and_widen"],
        Option(
            "none",
            "What a batch may change in the table's schema, recorded at the first batch and checked before anything of a "
            "batch is written (``SchemaMismatchError``): ``none``, ``add_columns`` (new columns, nullable) or ``add_and_widen`` "
            "(also int -> long, float -> double; not for Delta). See the schema page.",
            conf="str",
        ),
    ]
    compaction: Annotated[
        bool | Mapping[str, Any] | None,
        Option(
            None,
            "Rewrite small Parquet files of earlier batches into one at each compaction batch (``compact_interval``), "
            "published in that batch's commit: ``True`` for the defaults, or a mapping of ``target_size`` (default "
            '``"128MB"``), ``min_files`` (8 per partition), ``min_age`` (``"8 days"``: only files older than that, so '
            "that downstream file-source queries skip the new file; see the compaction page), ``max_bytes`` (per "
            'compaction batch, default the target size), ``quiet_period`` (``"0s"``: leave a partition alone that '
            "received a file this recently) and ``consumers`` (downstream file-source queries' checkpoint locations, or a "
            "mapping of them to their ``maxFileAge``: only files they have all read, below their horizon, are rewritten). "
            "Parquet, Delta and Iceberg tables; a dataset group's tables each compact on their "
            "own. Off by default.",
            conf="any",
        ),
    ]
    metrics: Annotated[
        bool | int | str | None,
        Option(
            None,
            "Export the sink's metrics (commit latency per phase, time since the last commit, rows, source lag, event-time "
            "freshness, small-file backlog, takeovers, refused batches; see the observability page): a port (``9108``) or "
            '``"host:port"`` serves them to Prometheus at ``/metrics`` (``0``: any free port, ``sink.metrics_endpoint`` '
            "says which); ``True`` keeps them for OpenTelemetry only. They also go through an OpenTelemetry SDK the "
            "application configured (or OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set). Needs the ``metrics`` extra. Off by default.",
            conf="any",
        ),
    ]
    lineage: Annotated[
        bool | Mapping[str, Any] | None,
        Option(
            None,
            "Send OpenLineage events: one run per query, one child run per batch with its inputs, outputs, table versions, "
            "source offsets and row counts. ``True``: openlineage-python's own configuration (``OPENLINEAGE_URL``, "
            '``openlineage.yml``); or a mapping of ``transport`` (``{"type": "http", "url": ...}``, ``file``, '
            "``console``), ``namespace``, ``job``, ``throttle`` (at most one batch event per duration; the batches between "
            "are folded in), ``inputs``, ``kafka_namespace`` and ``queue``. Needs the ``lineage`` extra. Off by default.",
            conf="any",
        ),
    ]
    adopt_existing_files: Annotated[
        bool,
        Option(
            False,
            "A new table's directory that already holds Parquet files (a batch job's output, pandas' files): they become "
            "its batch 0 - in its manifest, and its Delta commit and Iceberg snapshot - committed before the stream's first "
            "batch, once their layout (``partition_by``) and schema are checked against the stream's. By default such a "
            "directory is refused (``ExistingFilesError``): the table would hide their rows from every reader. Does nothing "
            "once the table has a batch. ``ExactlyOnceSink`` only. See the operations page.",
            conf="bool",
        ),
    ]
    options: Annotated[
        Mapping[str, str] | None,
        Option(
            None,
            "Deprecated name of ``writer_options`` (a ``DeprecationWarning``).",
            conf="table",
        ),
    ]


class GroupKeywords(SinkKeywords, total=False):
    """``DatasetSink``'s own options, besides every sink option."""

    dataset_column: Annotated[str | None, Option(None, "Split each batch by this column into one table per value under the root.")]
    outputs: Annotated[
        Iterable[Output] | None,
        Option(
            None,
            "Explicit outputs (``Output``): forks of the batch, each with its own transform, format, partitioning and checks.",
        ),
    ]
    checks: Annotated[Iterable[Check] | None, Option(None, "Quality checks (``Check``) for every output that sets none of its own.")]
    policy: Annotated[
        Literal["full", "partial"],
        Option(
            "full",
            "``full``: a failed mandatory check fails the batch; ``partial``: failed tables' batches are quarantined, the rest publish.",
        ),
    ]


@dataclass(frozen=True)
class Declared:
    name: str
    annotation: Any
    option: Option


def declared(keywords: type[Any] = SinkKeywords, *, own: bool = False) -> Iterator[Declared]:
    """Each option ``keywords`` declares, in order (``own``: not those of a base ``TypedDict``)."""
    hints = typing.get_type_hints(keywords, include_extras=True)
    inherited = set(typing.get_type_hints(SinkKeywords)) if own and keywords is not SinkKeywords else set()
    for name, hint in hints.items():
        if name in inherited:
            continue
        public, *extras = typing.get_args(hint)
        option = next(e for e in extras if isinstance(e, Option))
        yield Declared(name, public, option)


def signature(keywords: type[Any], *leading: str) -> inspect.Signature:
    """What ``inspect.signature`` and ``help()`` show for a sink: the positional ``leading``
    parameters, then every option with its default."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str) for name in leading]
    params += [
        inspect.Parameter(d.name, inspect.Parameter.KEYWORD_ONLY, default=d.option.default, annotation=d.annotation) for d in declared(keywords)
    ]
    return inspect.Signature(params, return_annotation=None)


def options_doc(keywords: type[Any], *, own: bool = False) -> str:
    """An ``Args:`` section of every option ``keywords`` declares (a sink's docstring gets it)."""
    lines = []
    for d in declared(keywords, own=own):
        default = "" if d.option.default is None else f" (default ``{d.option.default!r}``)"
        lines.append(f"    {d.name}: {d.option.doc}{default}")
    return "\n".join(lines)


def check_keywords(given: Mapping[str, Any], keywords: type[Any], where: str) -> None:
    """A misspelt option is a ``TypeError``, as for any Python call - with the closest name."""
    import difflib

    valid = [d.name for d in declared(keywords)]
    for name in given:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""))


def document(cls: type[Any], keywords: type[Any], *leading: str, own: bool = False) -> None:
    """Give a sink's ``__init__`` the full signature of its options, and its docstring their
    ``Args:`` (``help()``, IDEs that read docstrings)."""
    init = cls.__dict__["__init__"]
    init.__signature__ = signature(keywords, *leading)
    cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n\n    Options:\n" + options_doc(keywords, own=own).replace("\n    ", "\n        ") + "\n"


def conf_keys() -> dict[str, str]:
    """The ``[sink]`` section of a job config: where the table and checkpoint are, and every
    option a config file can set, with how it is read."""
    keys = {"table": "str", "checkpoint": "str", "metrics_path": "str"}
    keys.update({d.name: d.option.conf for d in declared() if d.option.conf is not None})
    return keys
