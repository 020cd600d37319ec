"""Validation of OpenLineage run events without the network.

openlineage-python ships its event model (generated classes) but not the spec's JSON Schema
files, and the tests may not fetch them. So the rules of the OpenLineage 2-0-2 run event and of
the standard facets the sink sends are restated here as JSON Schema - what is required, which
strings are URIs, UUIDs and date-times, which state names exist - and each of our custom facets
is validated against the schema we publish for it (``docs/observability/lineage``). Every event
is also rebuilt through openlineage-python's own classes, whose validators check it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

REPO = Path(__file__).resolve().parents[2]
URI = {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9+.-]*:"}
FACET = {"type": "object", "required": ["_producer", "_schemaURL"], "properties": {"_producer": URI, "_schemaURL": URI}}
DATASET = {
    "type": "object",
    "required": ["namespace", "name"],
    "properties": {"namespace": {"type": "string", "minLength": 1}, "name": {"type": "string", "minLength": 1}, "facets": {"type": "object"}},
}
RUN_EVENT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["eventTime", "producer", "schemaURL", "run", "job"],
    "properties": {
        "eventType": {"enum": ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]},
        "eventTime": {"type": "string", "format": "date-time"},
        "producer": URI,
        "schemaURL": {"type": "string", "pattern": r"^https://openlineage\.io/spec/2-0-2/OpenLineage\.json#/\$defs/RunEvent$"},
        "run": {
            "type": "object",
            "required": ["runId"],
            "properties": {"runId": {"type": "string", "format": "uuid"}, "facets": {"type": "object", "additionalProperties": FACET}},
        },
        "job": {
            "type": "object",
            "required": ["namespace", "name"],
            "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}, "facets": {"type": "object", "additionalProperties": FACET}},
        },
        "inputs": {"type": "array", "items": DATASET},
        "outputs": {"type": "array", "items": DATASET},
    },
}
#: the standard facets the sink sends: what each requires
STANDARD_FACETS: dict[str, dict[str, Any]] = {
    "parent": {
        "type": "object",
        "required": ["run", "job"],
        "properties": {
            "run": {"type": "object", "required": ["runId"], "properties": {"runId": {"type": "string", "format": "uuid"}}},
            "job": {"type": "object", "required": ["namespace", "name"]},
        },
    },
    "jobType": {
        "type": "object",
        "required": ["processingType", "integration"],
        "properties": {"processingType": {"enum": ["BATCH", "STREAMING"]}},
    },
    "errorMessage": {"type": "object", "required": ["message", "programmingLanguage"]},
    "datasetVersion": {"type": "object", "required": ["datasetVersion"], "properties": {"datasetVersion": {"type": "string"}}},
    "outputStatistics": {
        "type": "object",
        "properties": {
            "rowCount": {"type": "integer", "minimum": 0},
            "size": {"type": "integer", "minimum": 0},
            "fileCount": {"type": "integer", "minimum": 0},
        },
    },
    "schema": {
        "type": "object",
        "properties": {"fields": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}},
    },
    "tags": {"type": "object"},
}
CUSTOM = {
    "seo_batch": REPO / "docs/observability/lineage/SeoBatchRunFacet.json",
    "seo_tableVersions": REPO / "docs/observability/lineage/SeoTableVersionsDatasetFacet.json",
}


def _check(schema: dict[str, Any], instance: Any, where: str) -> None:
    errors = sorted(
        jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).iter_errors(instance), key=str
    )
    assert not errors, f"{where}: " + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


def _facets(facets: dict[str, Any], where: str) -> None:
    for key, facet in facets.items():
        _check(FACET, facet, f"{where}.{key}")
        if key in CUSTOM:
            _check(json.loads(CUSTOM[key].read_text()), facet, f"{where}.{key}")
        else:
            assert key in STANDARD_FACETS, f"{where}: facet {key!r} is neither standard nor one of ours"
            _check(STANDARD_FACETS[key], facet, f"{where}.{key}")


def validate(event: dict[str, Any]) -> None:
    """Raise ``AssertionError`` naming what is wrong with ``event`` (module docstring)."""
    _check(RUN_EVENT, event, "event")
    _facets(event["run"].get("facets", {}), "run.facets")
    _facets(event["job"].get("facets", {}), "job.facets")
    for kind in ("inputs", "outputs"):
        for i, dataset in enumerate(event.get(kind, [])):
            _facets(dataset.get("facets", {}), f"{kind}[{i}].facets")
            _facets(dataset.get("inputFacets" if kind == "inputs" else "outputFacets", {}), f"{kind}[{i}].{kind[:-1]}Facets")
    _rebuild(event)


def _rebuild(event: dict[str, Any]) -> None:
    """The event through openlineage-python's model: its validators (UUID run id, date-time with
    a time, producer and schema URLs) run again on what was written."""
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState

    RunEvent(
        eventType=RunState[event["eventType"]],
        eventTime=event["eventTime"],
        run=Run(runId=event["run"]["runId"]),
        job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"]),
        inputs=[InputDataset(namespace=d["namespace"], name=d["name"]) for d in event.get("inputs", [])],
        outputs=[OutputDataset(namespace=d["namespace"], name=d["name"]) for d in event.get("outputs", [])],
        producer=event["producer"],
    )
