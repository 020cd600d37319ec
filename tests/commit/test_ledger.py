"""The per-batch ledger through the commit layer (no Spark): built from the files in hand, carried
by the WAL claim so a roll-forward writes the same record, checked before the claim under
``audit="enforce"``, and audited at a cost that does not grow with the history."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.commit.table_steps.ledger_step import CHECKSUM_TAIL, WHOLE_CHECKSUM, checksum_of
from streaming_exactly_once.errors import AuditViolationError, ExactlyOnceError, WriterFencedError
from streaming_exactly_once.maintenance.audit import audit_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.ledger import ledger_path, read_ledger
from streaming_exactly_once.testing.faults import InjectedFailure
from tests.commit.helpers import make_committer
from tests.delta.helpers import commit_batch

Q = "1edge400-0000-0000-0000-000000000000"


def ids_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 10))


def test_each_batch_records_its_files_rows_and_checksums(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=3)
    for b in range(3):
        commit_batch(c, Q, b, ids_of(b))
    c.close()
    for b in range(3):
        led = read_ledger(storage, b)
        assert (led.batch_id, led.query_id, led.spark_batch_id) == (b, Q, b)
        assert led.rows_read == led.rows_written == 10 and [f.rows for f in led.files] == [5, 5]  # from the footers
        assert led.published == {"manifest": b} and led.input_files == ((f"file:///in/{Q[:4]}-{b}.csv", None, 1),)
        for f in led.files:
            data = storage.read_bytes(f.path)
            assert f.size == len(data) and f.checksum == checksum_of(data) and f.checksum_bytes == len(data)  # whole
    raw = (tmp_path / "t" / ledger_path(0)).read_text()
    assert raw.startswith("v1\n") and "\n" not in raw[3:] and json.loads(raw[3:])["rows"]["written"] == 10  # one record, documented bytes


def test_a_crash_after_the_manifest_leaves_the_ledger_to_the_roll_forward(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage)
    commit_batch(c, Q, 0, ids_of(0))
    c.close()
    failing = make_committer(storage, fail_at="after-manifest@1")
    with pytest.raises(InjectedFailure):
        commit_batch(failing, Q, 1, ids_of(1))
    failing.lease.stop_heartbeat()
    claim = CommitSequenceStore(storage).get(1)
    assert claim is not None and read_ledger(storage, 1) is None  # the batch is visible, its ledger only in the claim
    held = next(s for s in claim.steps if s.kind == "ledger").record
    failing.close()
    restarted = make_committer(storage)
    restarted.open()
    restarted.close()
    assert read_ledger(storage, 1) == held  # the same record, written by the roll-forward
    assert audit_table(storage).passed


def test_a_discarded_claim_leaves_no_ledger(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    failing = make_committer(storage, fail_at="after-wal@1")
    with pytest.raises(InjectedFailure):
        commit_batch(failing, Q, 0, ids_of(0))
    failing.lease.stop_heartbeat()
    failing.close()
    from streaming_exactly_once.cli.main import main

    with pytest.raises(SystemExit):
        main(["recover", str(tmp_path / "t"), "--discard-wal", "0"])
    assert read_ledger(storage, 0) is None and audit_table(storage).passed


def test_a_compaction_batch_records_the_rows_it_replaced_and_added(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    policy = CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20)
    c = make_committer(storage, compact_interval=3, compaction=policy)
    for b in range(3):
        commit_batch(c, Q, b, ids_of(b))
        c.janitor.drain()
    c.close()
    led = read_ledger(storage, 2)
    assert led.compaction is not None and len(led.compaction.replaced) == 4
    assert led.compaction.rows_replaced == led.compaction.rows_added == 20
    report = audit_table(storage, from_batch=0)
    assert report.passed, report.to_json()
    path = tmp_path / "t" / ledger_path(2)
    obj = json.loads(path.read_text()[3:])
    obj["compaction"]["rowsAdded"] = 19  # a compaction that drops a row
    path.write_text("v1\n" + json.dumps(obj))
    report = audit_table(storage, from_batch=0, record=False)
    assert [v.check for v in report.violations] == ["compaction"] and "20 rows by files holding 19" in report.violations[0].message


def test_enforce_refuses_a_batch_whose_offsets_overlap_the_table_and_publishes_nothing(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, audit="enforce")
    commit_with_offsets(c, 0, start=0, end=10)
    with pytest.raises(AuditViolationError) as refused:
        commit_with_offsets(c, 1, start=5, end=20)  # offsets [5, 10) again, nothing drops them
    assert isinstance(refused.value, ExactlyOnceError) and "[5, 10)" in str(refused.value) and refused.value.violations[0]["check"] == "offsets"
    c.close()
    assert open_storage(str(tmp_path / "t")).list_dir("_seo/wal") == [] and read_ledger(storage, 1) is None
    from streaming_exactly_once.manifest.manifest_log import ManifestLog

    assert ManifestLog(storage).latest_batch_id() == 0  # nothing of the refused batch published
    record = make_committer(storage)  # audit="record": published, and the audit names it
    commit_with_offsets(record, 1, start=5, end=20)
    record.close()
    report = audit_table(storage)
    assert [(v.check, v.batch_id) for v in report.violations] == [("offsets", 1)]


def commit_with_offsets(committer, spark_batch: int, *, start: int, end: int):
    """A batch of a Kafka-like source reading partition t/0 from ``start`` to ``end``."""
    from tests.commit.helpers import stage_file
    from tests.delta.helpers import SCHEMA, parquet

    committer.ensure_open()
    try:
        with committer.batch(Q, spark_batch, mode="rename") as attempt:
            attempt.offsets = replace(attempt.offsets, source_offsets=(json.dumps({"t": {"0": end}}),))
            attempt.ledger = replace(attempt.ledger, start={"t/0": start})
            ids = list(range(start, end))
            staged = stage_file(committer.storage, attempt, f"part-{spark_batch}-{attempt.attempt}.parquet", parquet(ids))
            return committer.commit(attempt, [staged], num_rows=len(ids), schema=SCHEMA)
    except BaseException:
        committer.invalidate()
        raise


@pytest.mark.parametrize("history", [6, 30])
def test_the_incremental_audit_reads_as_much_after_6_as_after_30_batches(tmp_path, history):
    from streaming_exactly_once.testing.faults import FaultInjectingStorage

    reads: list[str] = []

    class Counting(FaultInjectingStorage):
        def _at(self, op, path, when):
            if when == "before" and op in ("read_bytes", "read_tail", "info", "list_dir"):
                reads.append(path)

    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=5)
    for b in range(history):
        commit_batch(c, Q, b, ids_of(b))
    c.janitor.drain()  # the newest claim deleted: no batch in flight
    assert audit_table(storage).passed  # the first audit reads everything once
    commit_batch(c, Q, history, ids_of(history))
    c.close()
    reads.clear()
    report = audit_table(Counting(storage))
    assert report.passed and report.audited_from == history and report.audited_to == history
    # one new batch: its ledger and manifest file, its two files, the live listing (the newest
    # compact file and the deltas after it: at most the interval), the mark and identity
    assert len(reads) <= 25, reads
    assert not [p for p in reads if p.startswith("_seo/ledger/") and int(p.rsplit("/", 1)[1]) < history], reads
    assert not [
        p
        for p in reads
        if p.startswith("_spark_metadata/") and p.split("/")[1].split(".")[0].isdigit() and int(p.split("/")[1].split(".")[0]) < history - 5
    ]


def audit_of_one_new_batch(root, history: int):
    """Storage calls by operation and names listed by the audit of batch ``history``, after an
    audit of the ``history`` batches before it."""
    from collections import Counter

    from streaming_exactly_once.testing.faults import FaultInjectingStorage

    calls: Counter[str] = Counter()
    listed: list[str] = []

    class Counting(FaultInjectingStorage):
        def _at(self, op, path, when):
            if when == "before":
                calls[op] += 1

        def list_dir(self, path=""):
            found = super().list_dir(path)
            listed.extend(f"{path}/{f.name}" for f in found)
            return found

    storage = open_storage(str(root))
    c = make_committer(storage, compact_interval=5)
    for b in range(history):
        commit_batch(c, Q, b, ids_of(b))
    c.janitor.drain()
    assert audit_table(storage).passed
    commit_batch(c, Q, history, ids_of(history))
    c.close()
    calls.clear()
    report = audit_table(Counting(storage))
    assert report.passed and (report.audited_from, report.audited_to, report.latest_batch_id) == (history, history, history)
    return calls, listed, report.reads


def test_the_incremental_audit_makes_the_same_storage_calls_after_7_and_after_42_batches(tmp_path):
    small = audit_of_one_new_batch(tmp_path / "small", 7)
    large = audit_of_one_new_batch(tmp_path / "large", 42)
    assert small == large, (small, large)
    calls, listed, _ = large
    # no listing of the manifest (its size grows with the history), nor any read of a compact file
    assert not [p for p in listed if "_spark_metadata" in p], listed


def test_an_incremental_audit_reads_the_whole_table_when_the_compact_file_changed(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=5)
    for b in range(7):
        commit_batch(c, Q, b, ids_of(b))
    c.janitor.drain()
    c.close()
    assert audit_table(storage).passed
    compact = "_spark_metadata/4.compact"
    lines = storage.read_bytes(compact).decode().splitlines()
    storage.atomic_write(compact, ("\n".join([*lines, lines[-1]])).encode())  # a file live twice, in the compact file
    report = audit_table(storage)  # no new batch, but the compact file is not the one the mark saw
    assert [v.check for v in report.violations] == ["files"] and "live 2 times" in report.violations[0].message


def test_a_files_records_of_one_source_partition_are_counted_from_its_footer(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streaming_exactly_once.table.file_coordinates import PartitionRows, batch_partition_rows, file_partition_rows

    columns = ("topic", "partition", "offset")

    def footer(name, table):
        pq.write_table(table, tmp_path / name)
        return pq.read_metadata(tmp_path / name)

    one = footer("a.parquet", pa.table({"topic": ["t"] * 3, "partition": [2] * 3, "offset": [7, 5, 9]}))
    assert file_partition_rows(one, "a.parquet", columns) == PartitionRows("t/2", 3, 5, 10)
    mixed = footer("b.parquet", pa.table({"topic": ["t"] * 2, "partition": [0, 1], "offset": [1, 2]}))
    assert file_partition_rows(mixed, "b.parquet", columns) is None  # rows of two partitions: not counted
    unattributed = footer("c.parquet", pa.table({"topic": ["t", None], "partition": [0, 0], "offset": [1, 2]}))
    assert file_partition_rows(unattributed, "c.parquet", columns) is None  # a row of another source
    by_dir = footer("d.parquet", pa.table({"offset": [4, 5]}))  # partitionBy("topic", "partition")
    assert file_partition_rows(by_dir, "topic=t%2Fx/partition=1/d.parquet", columns) == PartitionRows("t/x/1", 2, 4, 6)
    assert file_partition_rows(by_dir, "d.parquet", columns) is None
    merged = batch_partition_rows([PartitionRows("t/0", 10, 0, 10), None, PartitionRows("t/0", 10, 0, 10)])
    assert merged == {"t/0": PartitionRows("t/0", 20, 0, 10)}  # 20 records in 10 offsets: read twice


def group_audit_of_one_new_batch(root, history: int):
    """Storage calls by operation and names listed by the audit of a dataset group's batch
    ``history``, after an audit of the ``history`` batches before it."""
    from collections import Counter

    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter, MemberBatch
    from streaming_exactly_once.commit.options import CommitterOptions
    from streaming_exactly_once.commit.protocol.attempt import StagedFile
    from streaming_exactly_once.testing.faults import FaultInjectingStorage
    from tests.delta.helpers import parquet

    calls: Counter[str] = Counter()
    listed: list[str] = []

    class Counting(FaultInjectingStorage):
        def _at(self, op, path, when):
            if when == "before":
                calls[op] += 1

        def list_dir(self, path=""):
            found = super().list_dir(path)
            listed.extend(f"{path}/{f.name}" for f in found)
            return found

    storage = open_storage(str(root))
    c = GroupCommitter(storage, CommitterOptions(heartbeat=False, compact_interval=5))

    def commit(g):
        c.ensure_open()
        attempt = c.begin(Q, g, mode="rename")
        final = f"part-00000-{attempt.attempt}.c000.snappy.parquet"
        staged = f"{attempt.staging_dir}/data/t0/{final}"
        storage.put_if_absent(staged, parquet(ids_of(g)))
        info = storage.info(staged)
        member = MemberBatch(
            table="t0", files=[StagedFile(final=final, size=info.size, mtime_ms=info.mtime_ms, staged=staged)], rows=10, format="parquet"
        )
        c.commit_group(attempt, [member], input_files=[InputFile(source=0, path=f"file:///in/{g}.csv", timestamp=1)])
        c.janitor.drain()

    for g in range(history):
        commit(g)
    assert audit_table(storage).passed
    commit(history)
    c.close()
    report = audit_table(Counting(storage))
    assert report.passed and (report.audited_to, report.latest_batch_id) == (history, history), report.to_json()
    assert [(t.audited_from, t.audited_to) for t in report.tables] == [(history, history)]
    return calls, listed


def test_the_incremental_audit_of_a_group_makes_the_same_storage_calls_after_7_and_after_42_batches(tmp_path):
    small = group_audit_of_one_new_batch(tmp_path / "small", 7)
    large = group_audit_of_one_new_batch(tmp_path / "large", 42)
    assert small == large, (small, large)
    _, listed = large
    assert not [p for p in listed if "_seo/commits" in p or "_spark_metadata" in p], listed  # nor the root's commits log


def test_a_byte_changed_inside_a_file_larger_than_the_footers_read_is_found(tmp_path):
    """A file of a couple of hundred KiB is checksummed whole: a byte flipped in a data page, far from
    the last 64 KiB the footer read covers, is named; a file above WHOLE_CHECKSUM only by its tail."""
    import random

    from streaming_exactly_once.commit.table_steps.ledger_step import checksum_span

    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage)
    rng = random.Random(7)
    commit_batch(c, Q, 0, [rng.getrandbits(62) for _ in range(28_000)])
    c.janitor.drain()
    c.close()
    victim = max(read_ledger(storage, 0).files, key=lambda f: f.size)
    assert CHECKSUM_TAIL * 2 < victim.size <= WHOLE_CHECKSUM and victim.checksum_bytes == victim.size, victim
    assert audit_table(storage).passed
    path = tmp_path / "t" / victim.path
    data = bytearray(path.read_bytes())
    data[len(data) // 4] ^= 0xFF  # inside a data page, same size
    path.write_bytes(bytes(data))
    report = audit_table(storage, from_batch=0)
    assert [(v.check, v.path) for v in report.violations] == [("files", victim.path)] and "checksum" in report.violations[0].message
    assert (checksum_span(WHOLE_CHECKSUM), checksum_span(WHOLE_CHECKSUM + 1), checksum_span(0)) == (WHOLE_CHECKSUM, CHECKSUM_TAIL, CHECKSUM_TAIL)


def test_a_file_of_an_audited_batch_deleted_or_cut_later_is_found_by_the_next_whole_run(tmp_path):
    """Without --from: the run after the manifest's next compact file (the one that reads the
    whole live listing anyway) lists the data directories and compares the live files' sizes."""
    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=5)
    for b in range(3):
        commit_batch(c, Q, b, ids_of(b))
    c.janitor.drain()
    assert audit_table(storage).passed
    deleted, cut = read_ledger(storage, 0).files[0].path, read_ledger(storage, 1).files[1].path
    (tmp_path / "t" / deleted).unlink()
    (tmp_path / "t" / cut).write_bytes((tmp_path / "t" / cut).read_bytes()[:-1])
    for b in range(3, 6):  # batch 4 writes the compact file
        commit_batch(c, Q, b, ids_of(b))
    c.janitor.drain()
    c.close()
    report = audit_table(storage)
    assert report.audited_from == 3
    found = {v.path: v.message for v in report.violations}
    assert sorted(found) == sorted([deleted, cut]) and "missing from storage" in found[deleted] and "cut short" in found[cut], found


def test_a_partition_two_sources_of_a_batch_read_breaks_the_offsets_check_and_an_explode_does_not():
    from streaming_exactly_once.table.ledger import LedgerRecord, PartitionCoverage
    from streaming_exactly_once.table.ledger_checks import batch_violations
    from streaming_exactly_once.table.source_offsets import read_by_several

    t = '{"t":{"0":10,"1":4}}'
    assert read_by_several([t, t], None) == {"t/0": 2, "t/1": 2}  # a new query's union of two subscriptions
    assert read_by_several([t, t], ['{"t":{"0":5,"1":4}}'] * 2) == {"t/0": 2}  # t/1: no source moved
    assert read_by_several([t, '{"u":{"0":3}}'], None) == {}  # two topics
    twice = LedgerRecord(0, Q, 0, partitions=(PartitionCoverage("t/0", ((0, 10),), sources=2),))
    assert LedgerRecord.from_json(json.loads(json.dumps(twice.to_json()))) == twice
    [v] = batch_violations(twice, {})
    assert (v.check, v.partition) == ("offsets", "t/0") and "[0, 10) are in the batch 2 times" in v.message
    # one source, more rows than offsets: one record made several rows (an explode) - no proof of a duplicate
    exploded = LedgerRecord(0, Q, 0, partitions=(PartitionCoverage("t/0", ((0, 10),), rows=30, row_offsets=(0, 10)),))
    assert batch_violations(exploded, {}) == []


def test_a_full_audit_reads_each_compaction_batchs_own_entries_from_the_tail_of_its_compact_file(tmp_path):
    """A compact file holds every live file; read whole for each compaction batch, a full audit
    cost O(batches x live files / interval). Only the newest one and the one before it are read
    whole (the live listing, and the newest compact file checked against the files before it)."""
    from streaming_exactly_once.testing.faults import FaultInjectingStorage

    whole: list[str] = []

    class Counting(FaultInjectingStorage):
        def _at(self, op, path, when):
            if when == "before" and op == "read_bytes" and path.endswith(".compact"):
                whole.append(path)

    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=5)
    for b in range(32):
        commit_batch(c, Q, b, ids_of(b))
    c.janitor.drain()
    c.close()
    report = audit_table(Counting(storage), from_batch=0, record=False)
    assert report.passed and report.audited_to == 31, report.to_json()
    assert sorted(set(whole)) == ["_spark_metadata/24.compact", "_spark_metadata/29.compact"], whole
    # a compaction batch whose file is missing from its compact file is still named
    compact = "_spark_metadata/19.compact"
    lines = storage.read_bytes(compact).decode().split("\n")
    storage.atomic_write(compact, "\n".join(lines[:-1]).encode())
    report = audit_table(storage, from_batch=0, record=False)
    assert [(v.check, v.batch_id) for v in report.violations] == [("files", 19)] and "does not list" in report.violations[0].message


def test_a_writer_woken_after_a_takeover_is_fenced_when_the_ledger_finds_its_staged_files_gone(tmp_path):
    """The ledger reads the batch's staged files before the claim: a frozen writer whose staging
    the successor's recovery removed fails there with ``WriterFencedError``, not the storage's
    FileNotFoundError, even when it calls ``commit`` outside ``committer.batch``."""
    from tests.commit.helpers import stage_file
    from tests.delta.helpers import parquet

    storage = open_storage(str(tmp_path / "t"))
    clock = [1000.0]
    zombie = make_committer(storage, timeout_ms=5_000)
    zombie.lease.clock = lambda: clock[0]
    commit_batch(zombie, Q, 0, ids_of(0))
    attempt = zombie.begin(Q, 1, mode="rename")
    staged = stage_file(storage, attempt, "p=a/part-00000.parquet", parquet(ids_of(1)))
    successor = make_committer(storage, timeout_ms=5_000)
    successor.lease.clock = lambda: clock[0]
    clock[0] += 10  # frozen past its lease
    successor.open()  # its recovery aborts the zombie's attempt: the staged file is gone
    with pytest.raises(WriterFencedError) as fenced:
        zombie.commit(attempt, [staged], num_rows=10)
    assert isinstance(fenced.value.__cause__, FileNotFoundError)
    successor.close()
