"""OpenLineage run events of a query and its batches, built with openlineage-python's model.

* The query is one run of job ``<job>`` (START when this process starts writing for it,
  COMPLETE when it lets the table go, FAIL if its last batch failed).
* Each batch - or run of batches folded by the throttle - is one run of job ``<job>.batch``
  whose ``parent`` facet names the query's run, with its inputs (the Kafka topics or file
  directories it read) and its outputs (the table, or a dataset group's tables it wrote) in the
  same COMPLETE event (a refused batch: a FAIL event with the error).
* The batch run carries ``seo_batch`` (``SeoBatchRunFacet``): source offsets where it started
  and ended, Spark and table batch ids, rows in/written/dropped as duplicates/rejected, files,
  bytes, the table's versions and the audit verdict. Each output carries ``datasetVersion``
  (the Delta version, else the Iceberg snapshot id, else the manifest batch), ``seo_tableVersions``
  with every format's version, ``outputStatistics`` and, where known, ``schema``.

The custom facets' JSON Schemas are ``docs/observability/lineage/*.json``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import attr
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    DatasetFacet,
    RunFacet,
    dataset_version_dataset,
    error_message_run,
    job_type_job,
    output_statistics_output_dataset,
    parent_run,
    schema_dataset,
)

from .audit_hook import AuditVerdict
from .lineage_facts import BatchFacts, dataset_of, input_dirs
from .settings import LineageSettings


def _version() -> str:
    try:
        return metadata.version("streaming-exactly-once")
    except metadata.PackageNotFoundError:
        return "unknown"


PRODUCER = f"urn:streaming-exactly-once:{_version()}"
SCHEMA_BASE = "urn:streaming-exactly-once:openlineage:1-0-0:"
BATCH_FACET = "seo_batch"
VERSIONS_FACET = "seo_tableVersions"


@attr.define
class SeoBatchRunFacet(RunFacet):
    """What one committed batch (or run of batches) of a query was: see the module docstring."""

    table: str
    queryId: str  # noqa: N815
    sparkBatchIds: dict[str, int]  # noqa: N815
    tableBatchIds: dict[str, int | None]  # noqa: N815
    batches: int
    sourceOffsets: list[dict[str, Any]]  # noqa: N815
    rows: dict[str, int]
    files: int
    bytes: int
    versions: dict[str, int]
    auditVerdict: dict[str, Any] | None = attr.field(default=None)  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_BASE + "SeoBatchRunFacet.json"


@attr.define
class SeoTableVersionsDatasetFacet(DatasetFacet):
    """Every version a batch made of the table: its manifest batch, Delta version, Iceberg snapshot."""

    manifestBatch: int | None = attr.field(default=None)  # noqa: N815
    delta: int | None = attr.field(default=None)
    iceberg: int | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_BASE + "SeoTableVersionsDatasetFacet.json"


def _time(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def query_event(state: str, *, run_id: str, job: str, settings: LineageSettings, at_ms: float, error: str | None = None) -> RunEvent:
    """The query's own run: START, COMPLETE or FAIL."""
    facets: dict[str, RunFacet] = {}
    if error is not None:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(message=error, programmingLanguage="PYTHON", producer=PRODUCER)
    return RunEvent(
        eventType=RunState[state],
        eventTime=_time(at_ms),
        run=Run(runId=run_id, facets=facets),
        job=Job(namespace=settings.namespace, name=job, facets={"jobType": _job_type("QUERY")}),
        producer=PRODUCER,
    )


def _job_type(kind: str) -> job_type_job.JobTypeJobFacet:
    return job_type_job.JobTypeJobFacet(processingType="STREAMING", integration="SPARK", jobType=kind, producer=PRODUCER)


def _parent(run_id: str, job: str, settings: LineageSettings) -> parent_run.ParentRunFacet:
    return parent_run.ParentRunFacet(run=parent_run.Run(runId=run_id), job=parent_run.Job(namespace=settings.namespace, name=job), producer=PRODUCER)


def batch_event(
    facts: BatchFacts,
    *,
    table: str,
    run_id: str,
    parent_run_id: str,
    job: str,
    settings: LineageSettings,
    start_offsets: list[str | None] | None,
    audit: AuditVerdict | None,
) -> RunEvent:
    """The COMPLETE event of a batch run (module docstring)."""
    facet = SeoBatchRunFacet(
        table=table,
        queryId=facts.query_id,
        sparkBatchIds={"first": facts.first_spark_batch, "last": facts.last_spark_batch},
        tableBatchIds={"first": facts.first_table_batch, "last": facts.last_table_batch},
        batches=facts.batches,
        sourceOffsets=[
            {"source": i, "start": (start_offsets[i] if start_offsets and i < len(start_offsets) else None), "end": end}
            for i, end in enumerate(facts.end_offsets)
        ],
        rows={
            "in": facts.rows_written + facts.rows_duplicate,
            "written": facts.rows_written,
            "duplicate": facts.rows_duplicate,
            "rejected": facts.rows_rejected,
        },
        files=facts.files,
        bytes=facts.bytes,
        versions=dict(facts.versions),
        auditVerdict=None if audit is None else audit.to_json(),
        producer=PRODUCER,
    )
    return RunEvent(
        eventType=RunState.COMPLETE,
        eventTime=_time(facts.committed_ms),
        run=Run(runId=run_id, facets={"parent": _parent(parent_run_id, job, settings), BATCH_FACET: facet}),
        job=Job(namespace=settings.namespace, name=f"{job}.batch", facets={"jobType": _job_type("MICRO_BATCH")}),
        inputs=_inputs(facts, settings),
        outputs=_outputs(facts, table),
        producer=PRODUCER,
    )


def failed_batch_event(
    *, query_id: str, spark_batch: int | None, run_id: str, parent_run_id: str, job: str, settings: LineageSettings, error: str, at_ms: float
) -> RunEvent:
    """The FAIL event of a batch that raised: nothing of it was published."""
    return RunEvent(
        eventType=RunState.FAIL,
        eventTime=_time(at_ms),
        run=Run(
            runId=run_id,
            facets={
                "parent": _parent(parent_run_id, job, settings),
                "errorMessage": error_message_run.ErrorMessageRunFacet(message=error, programmingLanguage="PYTHON", producer=PRODUCER),
            },
        ),
        job=Job(namespace=settings.namespace, name=f"{job}.batch", facets={"jobType": _job_type("MICRO_BATCH")}),
        producer=PRODUCER,
    )


def _inputs(facts: BatchFacts, settings: LineageSettings) -> list[InputDataset]:
    if settings.inputs:
        return [InputDataset(namespace=i["namespace"], name=i["name"]) for i in settings.inputs]
    found = [(settings.kafka_namespace, topic) for topic in facts.topics()]
    found += input_dirs(facts.input_files)
    return [InputDataset(namespace=namespace, name=name) for namespace, name in found]


def _outputs(facts: BatchFacts, table: str) -> list[OutputDataset]:
    namespace, name = dataset_of(table)
    if facts.members:  # a dataset group: each table it wrote
        return [
            OutputDataset(
                namespace=namespace,
                name=f"{name}/{member}",
                facets={
                    "datasetVersion": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(entry.get("batchId")), producer=PRODUCER)
                },
                outputFacets={
                    "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                        rowCount=entry.get("rows"), producer=PRODUCER
                    )
                },
            )
            for member, entry in sorted(facts.members.items())
        ]
    versions = facts.versions
    primary = versions.get("delta", versions.get("iceberg", versions.get("manifestBatch")))
    facets: dict[str, DatasetFacet] = {
        "datasetVersion": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(primary), producer=PRODUCER),
        VERSIONS_FACET: SeoTableVersionsDatasetFacet(
            manifestBatch=versions.get("manifestBatch"), delta=versions.get("delta"), iceberg=versions.get("iceberg"), producer=PRODUCER
        ),
    }
    fields = _schema_fields(facts.schema)
    if fields:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=fields, producer=PRODUCER)
    stats = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
        rowCount=facts.rows_written, size=facts.bytes, fileCount=facts.files, producer=PRODUCER
    )
    return [OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets={"outputStatistics": stats})]


def _schema_fields(schema: str | None) -> list[schema_dataset.SchemaDatasetFacetFields]:
    """A Spark schema's JSON as OpenLineage's schema fields (nested structs nested)."""
    if not schema:
        return []
    try:
        parsed = json.loads(schema)
    except ValueError:
        return []
    return _fields(parsed.get("fields") or [])


def _fields(fields: list[dict[str, Any]]) -> list[schema_dataset.SchemaDatasetFacetFields]:
    out = []
    for f in fields:
        kind = f.get("type")
        nested = _fields(kind.get("fields") or []) if isinstance(kind, dict) and kind.get("type") == "struct" else []
        type_name = kind if isinstance(kind, str) else str(kind.get("type")) if isinstance(kind, dict) else str(kind)
        out.append(schema_dataset.SchemaDatasetFacetFields(name=str(f.get("name")), type=type_name, fields=nested))
    return out
