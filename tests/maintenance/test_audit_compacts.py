"""``seo audit`` on a manifest compact file that holds more or less than it should: an entry of a
live file left out (its rows lost to every reader, the file still on disk) or a file a compaction
replaced listed again (its rows read twice). Both readers and the per-batch checks miss them: the
batch files are intact, only the compact file readers read is wrong. Tables of
``test_audit_faults`` (compact interval 3: batch 2 writes ``2.compact``)."""

from __future__ import annotations

import json
import time

from streaming_exactly_once.table.ledger import read_ledger
from tests.maintenance.test_audit_faults import manifest_lines, table
from tests.maintenance.test_audit_moved import audit


def rewrite_compact(storage, keep) -> None:
    lines = manifest_lines(storage, "2.compact")
    storage.atomic_write("_spark_metadata/2.compact", "\n".join([lines[0], *(line for line in lines[1:] if keep(line))]).encode())


def named(violations, text):
    return [v for v in violations if v["check"] == "files" and v["batchId"] == 2 and text in v["message"]]


def test_a_live_file_left_out_of_a_compact_file_is_named_by_the_incremental_and_the_full_audit(tmp_path):
    def mark_after_batch_1(storage, b):
        if b == 1:
            assert audit(storage.root_uri) == (0, [])  # the mark: batches 0-1, no compact file yet

    storage = table(tmp_path, "parquet", batches=3, between=mark_after_batch_1)
    lost = read_ledger(storage, 1).files[0].path
    rewrite_compact(storage, lambda line: lost not in line)
    for args in ((), ("--from", "0", "--no-record")):
        code, violations = audit(storage.root_uri, *args)
        assert code == 1 and len(named(violations, f"leaves out {lost}")) == 1, (args, violations)


def test_a_replaced_file_listed_again_in_a_compact_file_is_named(tmp_path):
    storage = table(tmp_path, "parquet", compaction=True)  # batch 2 rewrites the four files of batches 0 and 1
    replaced = [path for path, _ in read_ledger(storage, 2).compaction.replaced]
    again = next(line for line in manifest_lines(storage, "0")[1:] if replaced[0] in line)
    storage.atomic_write("_spark_metadata/2.compact", "\n".join([*manifest_lines(storage, "2.compact"), again]).encode())
    code, violations = audit(storage.root_uri, "--from", "0", "--no-record")
    assert code == 1 and len(named(violations, f"lists {replaced[0]}, which batch 2's compaction replaced")) == 1, violations


def test_entries_an_entry_retention_expired_are_not_called_lost(tmp_path):
    storage = table(tmp_path, "parquet", retention_ms=1, between=lambda storage, b: time.sleep(0.01))
    compact = manifest_lines(storage, "2.compact")[1:]
    assert [json.loads(line)["path"] for line in compact if line] and len(compact) == 2  # batch 2's own two files: 0 and 1 expired
    assert read_ledger(storage, 2).manifest_retention_ms == 1
    assert audit(storage.root_uri, "--from", "0", "--no-record") == (0, [])


def test_a_batch_file_under_the_wrong_kinds_name_is_named_by_the_incremental_audit(tmp_path):
    storage = table(tmp_path, "parquet", batches=5)  # batches 0-4: 5 is a compaction batch, its file must be 5.compact
    assert audit(storage.root_uri) == (0, [])
    storage.atomic_write("_spark_metadata/5", storage.read_bytes("_spark_metadata/4"))  # another tool's batch 5
    code, violations = audit(storage.root_uri)
    assert code == 1 and [(v["check"], v["batchId"]) for v in violations] == [("files", 5)], violations
    assert storage.uri("_spark_metadata/5") in violations[0]["message"]
