"""``seo audit`` on tables real streaming queries wrote (parquet, Delta + Iceberg, a dataset group,
the Kafka stand-in), clean and with each fault planted by hand: the audit names every one."""

from __future__ import annotations

import json
import shutil

import pytest

from streaming_exactly_once import DatasetSink, ExactlyOnceSink
from streaming_exactly_once.cli.main import main
from streaming_exactly_once.maintenance.audit import audit_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.ledger import ledger_path, read_ledger
from streaming_exactly_once.testing.fake_kafka import FakeKafka, produce
from tests.datagen import write_csv_files
from tests.sink.conftest import run_query, stream

pytestmark = pytest.mark.spark


def audit(table, *args):
    """``seo --json audit`` in this process: (exit code, document)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["--json", "audit", str(table), *args])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, json.loads(out.getvalue())


def checks_failed(doc):
    return {(v["check"], v["batchId"]) for v in doc["violations"]}


def ledger_json(table, batch):
    path = table / ledger_path(batch)
    return path, json.loads(path.read_text().split("\n", 1)[1])


def write_ledger_json(path, obj):
    path.write_text("v1\n" + json.dumps(obj, separators=(",", ":")))


def test_parquet_stream_ledger_and_planted_faults(spark, tmp_path, capsys):
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=10)
    table = tmp_path / "t"
    _, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", partition_by=["p"])
    assert error is None
    storage = open_storage(str(table))
    ledgers = [read_ledger(storage, b) for b in range(3)]
    assert all(led is not None for led in ledgers)
    assert sum(led.rows_written for led in ledgers) == len(ids)  # the files' footers hold every row
    assert all(led.rows_read == led.rows_written and led.published == {"manifest": led.batch_id} for led in ledgers)
    assert all(f.rows and f.checksum.startswith("crc32:") and f.checksum_bytes == f.size for led in ledgers for f in led.files)
    assert [len(led.input_files) for led in ledgers] == [2, 2, 2]
    code, doc = audit(table)
    assert code == 0 and doc["passed"] and doc["auditedTo"] == 2 and doc["ledgerFrom"] == 0, doc
    # incremental: nothing new, nothing read but the manifest's newest batch and the next (two
    # existence checks, no listing), the ledger after the newest, and a stat of each of the three
    # batch files after the newest compact file (none yet: fewer than the compact interval), and
    # whether the next batch's file is there under the other kind's name
    code, doc = audit(table)
    assert code == 0 and doc["auditedFrom"] == 3 and doc["auditedTo"] is None and doc["reads"] <= 3 + 3 + 1, doc

    backup = tmp_path / "backup"
    shutil.copytree(table, backup)

    def restore():
        shutil.rmtree(table)
        shutil.copytree(backup, table)

    victim = table / ledgers[1].files[0].path
    victim.unlink()  # a file deleted
    code, doc = audit(table, "--from", "0")
    assert code == 1 and ("files", 1) in checks_failed(doc) and ledgers[1].files[0].path in doc["violations"][0]["message"]
    restore()
    data = bytearray(victim.read_bytes())
    data[-20] ^= 0xFF  # a file altered in place, same size
    victim.write_bytes(bytes(data))
    code, doc = audit(table, "--from", "0")
    assert code == 1 and any("checksum" in v["message"] for v in doc["violations"]), doc
    restore()
    manifest = table / "_spark_metadata" / "2"
    extra = manifest.read_text().split("\n")[1]
    (table / "_spark_metadata" / "1").write_text((table / "_spark_metadata" / "1").read_text() + "\n" + extra)  # a duplicated entry
    code, doc = audit(table, "--from", "0")
    assert code == 1 and ("files", 1) in checks_failed(doc) and ("files", None) in checks_failed(doc), doc  # unledgered and live twice
    restore()
    (table / ledger_path(2)).unlink()  # a manifest batch without its ledger
    code, doc = audit(table, "--from", "0")
    assert code == 1 and ("ledger", 2) in checks_failed(doc)
    restore()
    path, obj = ledger_json(table, 1)
    obj["rows"]["written"] -= 1  # rows not conserved
    write_ledger_json(path, obj)
    code, doc = audit(table, "--from", "0")
    assert code == 1 and ("rows", 1) in checks_failed(doc)
    restore()
    # the human output names the batch, the file and what to do
    victim.unlink()
    with pytest.raises(SystemExit) as exit_:
        main(["audit", str(table), "--from", "0"])
    out = capsys.readouterr().out
    assert exit_.value.code == 1 and "VIOLATION [files]" in out and "batch 1" in out and "Restore it" in out, out


@pytest.fixture(scope="module")
def kafka(spark):
    spark.dataSource.register(FakeKafka)
    return spark


def kafka_stream(spark, root):
    df = spark.readStream.format("fakekafka").option("path", str(root)).option("subscribe", "t").option("startingOffsets", "earliest").load()
    return df.selectExpr("CAST(value AS STRING) AS id", "topic", "partition", "offset")


def run_kafka(sink, df, checkpoint):
    query = sink.start(df, checkpoint_location=str(checkpoint), trigger={"availableNow": True})
    try:
        query.awaitTermination()
    finally:
        sink.close()


def test_kafka_offsets_are_ledgered_and_overlaps_and_skips_are_named(kafka, tmp_path):
    src, table = tmp_path / "kafka", tmp_path / "t"
    for p in range(2):
        produce(src, "t", p, [f"t-{p}-{i}" for i in range(10)])
    run_kafka(ExactlyOnceSink(str(table)), kafka_stream(kafka, src), tmp_path / "c1")
    for p in range(2):
        produce(src, "t", p, [f"t-{p}-{i}" for i in range(10, 15)])
    run_kafka(ExactlyOnceSink(str(table)), kafka_stream(kafka, src), tmp_path / "c2")  # a new checkpoint from earliest
    storage = open_storage(str(table))
    first, second = read_ledger(storage, 0), read_ledger(storage, 1)
    # the stand-in records no initial offsets: of the table's first batch only the ends are known
    assert {p.partition: (p.ranges, p.end) for p in first.partitions} == {"t/0": ((), 10), "t/1": ((), 10)}
    # the second query re-read [0, 10): an exception (already in the table), its rows dropped
    assert {p.partition: (p.ranges, p.exceptions) for p in second.partitions} == {
        "t/0": (((0, 15),), ((0, 10),)),
        "t/1": (((0, 15),), ((0, 10),)),
    }
    assert second.rows_dropped == 20 and second.drop_reasons == {"offsetBelowMark": 20} and second.rows_written == 10
    code, doc = audit(table)
    assert code == 0, doc
    path, obj = ledger_json(table, 1)
    original = json.loads(json.dumps(obj))
    obj["partitions"][0]["exceptions"] = [[0, 8]]  # offsets 8, 9 written twice
    obj["rows"]["dropped"] = obj["rows"]["read"] - obj["rows"]["written"]
    write_ledger_json(path, obj)
    code, doc = audit(table, "--from", "0")
    assert code == 1 and ("offsets", 1) in checks_failed(doc) and "[8, 10)" in doc["violations"][0]["message"], doc
    obj = json.loads(json.dumps(original))
    obj["partitions"][0]["ranges"] = [[12, 15]]  # an offset range skipped, no allowed gap recorded
    obj["partitions"][0].pop("exceptions")
    write_ledger_json(path, obj)
    code, doc = audit(table, "--from", "0")
    assert code == 1 and any("[10, 12) were never written" in v["message"] for v in doc["violations"]), doc


def test_a_partition_read_twice_in_one_batch_is_refused_by_enforce_and_named_by_the_audit(kafka, tmp_path):
    """A query reading one topic through two sources (a union of two subscriptions) writes every
    record twice in one batch, above every mark, so no offset guard drops them. audit="enforce"
    refuses the batch with the query's own error, publishing nothing, and the corrected query goes
    on with every record once; audit="record" publishes it and `seo audit` names the batch, the
    partition and the offsets."""
    from streaming_exactly_once.errors import AuditViolationError
    from streaming_exactly_once.manifest.manifest_log import ManifestLog

    src, table, recorded = tmp_path / "kafka", tmp_path / "t", tmp_path / "r"
    produce(src, "t", 0, [f"t-0-{i}" for i in range(10)])
    twice = kafka_stream(kafka, src).union(kafka_stream(kafka, src))
    with pytest.raises(Exception) as refused:
        run_kafka(ExactlyOnceSink(str(table), audit="enforce"), twice, tmp_path / "c1")
    cause = refused.value
    while cause is not None and not isinstance(cause, AuditViolationError):
        cause = cause.__cause__ or cause.__context__
    assert isinstance(cause, AuditViolationError), repr(refused.value)
    assert cause.violations[0]["check"] == "offsets" and cause.violations[0]["partition"] == "t/0", cause.violations
    assert "reads t/0 through 2 sources of its query: its records [0, 10) are in the batch 2 times each" in str(cause), str(cause)
    storage = open_storage(str(table))
    assert ManifestLog(storage).latest_batch_id() is None and read_ledger(storage, 0) is None  # nothing published
    run_kafka(ExactlyOnceSink(str(table), audit="enforce"), kafka_stream(kafka, src), tmp_path / "c2")
    ids = [r.id for r in kafka.read.parquet(str(table)).collect()]
    assert sorted(ids) == sorted(f"t-0-{i}" for i in range(10))  # every record once
    first = read_ledger(storage, 0)
    assert [(p.partition, p.rows, p.row_offsets, p.sources) for p in first.partitions] == [("t/0", 10, (0, 10), 1)]
    code, doc = audit(table)
    assert code == 0, doc
    # recorded, not enforced: published, and the audit names it
    run_kafka(ExactlyOnceSink(str(recorded)), twice, tmp_path / "c3")
    ids = [r.id for r in kafka.read.parquet(str(recorded)).collect()]
    assert sorted(ids) == sorted(f"t-0-{i}" for i in range(10) for _ in range(2))  # each record twice
    code, doc = audit(recorded)
    assert code == 1 and checks_failed(doc) == {("offsets", 0)}, doc
    assert doc["violations"][0]["partition"] == "t/0" and "[0, 10)" in doc["violations"][0]["message"], doc


def test_a_checkpoint_whose_offsets_were_put_back_re_reads_without_writing_twice(kafka, tmp_path):
    """offsets/0 of a checkpoint edited back from 10 to 5 (a partial restore of an older copy):
    the restart re-reads [5, 15) in its own query, like a recreated topic would. The record at 9
    is the table's, so [5, 10) is a re-read: dropped, and the ledger says so."""
    src, table, ckpt = tmp_path / "kafka", tmp_path / "t", tmp_path / "c"
    produce(src, "t", 0, [f"t-0-{i}" for i in range(10)])
    run_kafka(ExactlyOnceSink(str(table), audit="enforce"), kafka_stream(kafka, src), ckpt)
    offsets0 = ckpt / "offsets" / "0"
    assert '{"t": {"0": 10}}' in offsets0.read_text()
    offsets0.write_text(offsets0.read_text().replace('{"t": {"0": 10}}', '{"t": {"0": 5}}'))
    produce(src, "t", 0, [f"t-0-{i}" for i in range(10, 15)])
    run_kafka(ExactlyOnceSink(str(table), audit="enforce"), kafka_stream(kafka, src), ckpt)
    ids = [r.id for r in kafka.read.parquet(str(table)).collect()]
    assert sorted(ids) == sorted(f"t-0-{i}" for i in range(15))  # every record once
    second = read_ledger(open_storage(str(table)), 1)
    assert [(p.ranges, p.exceptions, p.reset) for p in second.partitions] == [(((5, 15),), ((5, 10),), False)]
    assert second.drop_reasons == {"offsetBelowMark": 5} and second.rows_written == 5
    code, doc = audit(table, "--from", "0")
    assert code == 0, doc


def test_delta_and_iceberg_stream_ledger_and_planted_faults(spark, tmp_path):
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    write_csv_files(tmp_path / "in", n_files=4, rows_per_file=10)
    table = tmp_path / "t"
    _, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", format=["delta", "iceberg"], partition_by=["p"])
    assert error is None
    led = read_ledger(open_storage(str(table)), 1)
    assert led.published["manifest"] == 1 and led.published["delta"] is not None and led.published["iceberg"] is not None
    code, doc = audit(table)
    assert code == 0 and doc["checks"]["formats"] == "passed", doc
    backup = tmp_path / "backup"
    shutil.copytree(table, backup)
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(
        str(table), pa.table({"id": [10_000], "v": [0.5], "p": ["a b"]}), mode="append", partition_by=["p"]
    )  # a Delta add of an extra file
    code, doc = audit(table, "--from", "0")
    assert code == 1 and any(v["check"] == "formats" and "Delta table holds" in v["message"] for v in doc["violations"]), doc
    shutil.rmtree(table)
    shutil.copytree(backup, table)
    (table / led.files[0].path).unlink()  # a file deleted: every format's readers lose it
    code, doc = audit(table, "--from", "0")
    assert code == 1 and ("files", 1) in checks_failed(doc)


def test_dataset_group_ledgers_and_audit(spark, tmp_path):
    write_csv_files(tmp_path / "in", n_files=4, rows_per_file=10)
    root = tmp_path / "lake"
    sink = DatasetSink(str(root), dataset_column="p")
    query = sink.start(stream(spark, tmp_path / "in"), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    query.awaitTermination()
    sink.close()
    report = audit_table(open_storage(str(root)))
    assert report.passed and len(report.tables) >= 4, report.to_json()
    written = [read_ledger(open_storage(t.table), b) for t in report.tables for b in range(t.latest_batch_id + 1)]
    assert sum(led.rows_written for led in written if "_quarantine" not in led.files[0].path) >= 40
    member = report.tables[0].table
    storage = open_storage(member)
    victim = read_ledger(storage, 0).files[0].path
    storage.delete(victim)
    code, doc = audit(root, "--from", "0")
    assert code == 1 and any(v["table"] == member and v["check"] == "files" for v in doc["violations"]), doc
