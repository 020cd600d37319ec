"""OpenLineage events of real commits (no Spark): openlineage-python's file transport writes them,
each is validated (``openlineage_schema``) and the runs must connect - the query's run, each
batch's run under it with its inputs and outputs in the same event."""

from __future__ import annotations

import json

import pytest

from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.observability.audit_hook import AuditVerdict, register_audit_reader
from streaming_exactly_once.observability.lineage_facts import BatchFacts, dataset_of
from streaming_exactly_once.observability.settings import lineage_settings
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer, stage_and_commit

from .openlineage_schema import validate

pytest.importorskip("openlineage.client", reason="the lineage extra (make test installs it)")
QUERY = "11111111-2222-3333-4444-555555555555"


def lineage_run(tmp_path, **options):
    from streaming_exactly_once.observability.lineage_emitter import LineageRun

    log = tmp_path / "lineage.jsonl"
    settings = lineage_settings({"transport": {"type": "file", "log_file_path": str(log), "append": True}, **options})
    return LineageRun(open_storage(str(tmp_path / "t")).root_uri, settings), log


def events(log):
    out = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    for event in out:
        validate(event)
    return out


def facts(result, batch, source_dir="file:///landing/orders"):
    return BatchFacts.of(
        result,
        checkpoint=None,
        end_offsets=[json.dumps({"orders": {"0": 10 * (batch + 1), "1": 5 * (batch + 1)}}), '{"logOffset":%d}' % batch],
        input_files=[InputFile(1, f"{source_dir}/day=1/part-{batch}.csv", 1), InputFile(1, f"{source_dir}/day=2/part-{batch}.csv", 1)],
    )


def commit_through(run, committer, batches, commit=stage_and_commit):
    """``batches`` batches of two rows committed, each handed to the lineage run; then its end."""
    try:
        run.query_started(QUERY)
        for b in range(batches):
            run.batch_done(facts(commit(committer, QUERY, b, [b * 2, b * 2 + 1]), b))
        run.close()
    finally:
        committer.close()


def test_a_query_run_with_one_connected_child_run_per_batch(tmp_path):
    committer = make_committer(open_storage(str(tmp_path / "t")))
    run, log = lineage_run(tmp_path, job="orders-ingest", kafka_namespace="kafka://broker:9092")
    register_audit_reader(lambda table: AuditVerdict(True, 1_800_000_000.0, 1) if table == run.table else None)
    try:
        run.query_started(QUERY)
        results = [stage_and_commit(committer, QUERY, b, [b * 3, b * 3 + 1, b * 3 + 2]) for b in range(3)]
        for b, result in enumerate(results):
            run.batch_done(facts(result, b))
        run.close()
    finally:
        register_audit_reader(None)
        committer.close()
    got = events(log)
    assert [(e["eventType"], e["job"]["name"]) for e in got] == [
        ("START", "orders-ingest"),
        *[("COMPLETE", "orders-ingest.batch")] * 3,
        ("COMPLETE", "orders-ingest"),
    ]
    query_run = got[0]["run"]["runId"]
    assert got[-1]["run"]["runId"] == query_run
    batches = got[1:4]
    assert len({e["run"]["runId"] for e in batches} | {query_run}) == 4
    table_ns, table_name = dataset_of(run.table)
    for b, event in enumerate(batches):
        assert event["run"]["facets"]["parent"]["run"]["runId"] == query_run
        parent_job = event["run"]["facets"]["parent"]["job"]
        assert (parent_job["namespace"], parent_job["name"]) == ("streaming_exactly_once", "orders-ingest")
        # inputs and outputs in the same event
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("kafka://broker:9092", "orders"), ("file", "/landing/orders")]
        (out,) = event["outputs"]
        assert (out["namespace"], out["name"]) == (table_ns, table_name) == ("file", str(tmp_path / "t"))
        assert out["facets"]["datasetVersion"]["datasetVersion"] == str(b)  # the manifest batch
        assert out["facets"]["seo_tableVersions"]["manifestBatch"] == b
        assert out["outputFacets"]["outputStatistics"] == {**out["outputFacets"]["outputStatistics"], "rowCount": 3, "fileCount": 2}
        facet = event["run"]["facets"]["seo_batch"]
        assert facet["sparkBatchIds"] == {"first": b, "last": b} and facet["tableBatchIds"] == {"first": b, "last": b}
        assert facet["rows"] == {"in": 3, "written": 3, "duplicate": 0, "rejected": 0}
        assert facet["sourceOffsets"][0]["end"] == json.dumps({"orders": {"0": 10 * (b + 1), "1": 5 * (b + 1)}})
        assert facet["auditVerdict"] == {"passed": True, "timestamp": 1_800_000_000.0, "batchId": 1, "detail": ""}


def test_the_throttle_folds_batches_and_loses_none(tmp_path):
    committer = make_committer(open_storage(str(tmp_path / "t")))
    run, log = lineage_run(tmp_path, throttle="1h")
    commit_through(run, committer, 40)
    got = events(log)
    batch_events = [e for e in got if e["job"]["name"].endswith(".batch")]
    assert len(got) == 4 and len(batch_events) == 2  # START, batch 0 at once, batches 1-39 at the query's end, COMPLETE
    first, folded = (e["run"]["facets"]["seo_batch"] for e in batch_events)
    assert first["batches"] == 1 and folded["batches"] == 39
    assert folded["sparkBatchIds"] == {"first": 1, "last": 39} and folded["tableBatchIds"] == {"first": 1, "last": 39}
    assert first["rows"]["written"] + folded["rows"]["written"] == 80
    assert batch_events[1]["outputs"][0]["outputFacets"]["outputStatistics"]["fileCount"] == 78


def test_a_failed_batch_and_query_are_fail_events(tmp_path):
    from streaming_exactly_once.errors import WriterFencedError

    run, log = lineage_run(tmp_path)
    run.query_started(QUERY, "named-query")
    run.batch_failed(QUERY, 7, WriterFencedError("This writer (epoch 3) lost table x"))
    run.close()
    got = events(log)
    assert [(e["eventType"], e["job"]["name"]) for e in got] == [
        ("START", "named-query"),
        ("FAIL", "named-query.batch"),
        ("FAIL", "named-query"),
    ]
    assert got[1]["run"]["facets"]["errorMessage"]["message"].startswith("WriterFencedError: This writer (epoch 3)")
    assert got[1]["run"]["facets"]["parent"]["run"]["runId"] == got[0]["run"]["runId"]


def test_every_format_written_has_its_version(tmp_path):
    """A ``format=["delta", "iceberg"]`` commit: datasetVersion is the Delta version, and the
    table-versions facet has the manifest batch, the Delta version and the Iceberg snapshot id."""
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    from streaming_exactly_once.iceberg.settings import IcebergSettings
    from tests.delta.helpers import commit_batch, delta_committer

    storage = open_storage(str(tmp_path / "t"))
    committer = delta_committer(storage, iceberg=IcebergSettings())
    run, log = lineage_run(tmp_path)
    commit_through(run, committer, 2, commit_batch)
    outputs = [e["outputs"][0] for e in events(log) if e["job"]["name"].endswith(".batch")]
    for b, out in enumerate(outputs):
        versions = out["facets"]["seo_tableVersions"]
        assert versions["manifestBatch"] == b and versions["delta"] == b and isinstance(versions["iceberg"], int)
        assert out["facets"]["datasetVersion"]["datasetVersion"] == str(versions["delta"])
        assert [f["name"] for f in out["facets"]["schema"]["fields"]] == ["id", "p"]
    assert outputs[0]["facets"]["seo_tableVersions"]["iceberg"] != outputs[1]["facets"]["seo_tableVersions"]["iceberg"]
