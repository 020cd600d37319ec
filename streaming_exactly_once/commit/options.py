"""How a table is committed: the commit layer's own settings, given by the sinks (``sink.options``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..delta.target import DeltaSettings
from ..iceberg.settings import IcebergCatalogRef, IcebergSettings
from .rewrites.data_compaction import CompactionPolicy


@dataclass(frozen=True)
class CommitterOptions:
    """A setting the sinks also take has the sink option's name here (``SinkOptions``:
    ``retention_ms`` from ``retention``, ``writer_options``, ...)."""

    format: str = "parquet"
    partition_by: tuple[str, ...] = ()
    compact_interval: int = 10
    min_batches_to_retain: int = 100
    cleanup_delay_ms: int = 600_000
    retention_ms: int | None = None
    source_retention_ms: int | None = None
    lease_timeout_ms: int = 60_000
    heartbeat: bool = True
    move_threads: int = 8
    step_retries: int = 3
    description: str = ""
    writer_options: tuple[tuple[str, str], ...] = ()
    build_manifest_index: bool = True
    prepare_compactions: bool = True
    worker_moves_from: int = 5_000  # move lists this long run on the workers (when a sink gives them)
    #: ``format="delta"``: every batch is also one Delta commit (``commit.table_steps.format_step``); None: no Delta log
    delta: DeltaSettings | None = None
    #: ``format="iceberg"``: every batch is also one Iceberg snapshot (``commit.table_steps.format_step``);
    #: None: no Iceberg table
    iceberg: IcebergSettings | None = None
    #: where the Iceberg table is recorded (default: its own metadata files, found by path)
    iceberg_catalog: IcebergCatalogRef = IcebergCatalogRef()
    #: that catalog's properties (credentials included): given to the steps at run time only
    iceberg_catalog_properties: tuple[tuple[str, str], ...] = ()
    #: False: the manifest is kept under ``_seo/manifest``, out of Spark's file-source readers' sight
    spark_manifest: bool = True
    #: what a batch may change in the table's schema (``table.schema_rules.EVOLUTION_MODES``)
    schema_evolution: str = "none"
    #: small files of earlier batches rewritten by each compaction batch (``commit.rewrites.data_compaction``); None: off
    compaction: CompactionPolicy | None = None
    #: a new table's directory that holds Parquet files: its first batch adopts them
    #: (``commit.adoption``); False: such a directory is refused
    adopt_existing_files: bool = False
    #: "record": every batch writes its ledger (``commit.table_steps.ledger_step``); "enforce": also checks
    #: the batch's own invariants before its claim and refuses one that breaks them
    audit: str = "record"
