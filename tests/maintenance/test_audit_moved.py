"""``seo audit`` on a table copied or moved to another directory, and on a manifest batch file
changed by hand after the run that audited it.

A moved table's manifest still names the root its writer used; the audit must map those entries
to the table's current place as the readers do (every root ``_seo/table`` records), or it would
call each batch's files "published outside a commit" and send the user to repair a healthy table.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest

from streaming_exactly_once.cli.main import main
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.ledger import read_ledger
from tests.maintenance.test_audit_faults import manifest_lines, table


def audit(root: str, *args: str) -> tuple[int, list[dict]]:
    """``seo --json audit ROOT ARGS`` in this process: (exit code, violations)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["--json", "audit", root, *args])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, json.loads(out.getvalue())["violations"]


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_a_copied_and_a_moved_table_audit_clean_and_a_fault_in_them_is_still_named(tmp_path, fmt):
    if fmt == "delta":
        pytest.importorskip("deltalake")
    origin = table(tmp_path / "w", fmt)
    src = tmp_path / "w" / fmt
    assert audit(origin.root_uri, "--no-record") == (0, [])
    copy, moved = tmp_path / "copy", tmp_path / "moved"
    shutil.copytree(src, copy)
    shutil.move(str(src), str(moved))  # the root the manifest names is gone
    for place in (copy, moved):
        assert audit(str(place), "--from", "0", "--no-record") == (0, []), place
    # a real fault in the moved table is still found, named with the batch and the file
    lost = read_ledger(open_storage(str(moved)), 1).files[0].path
    (moved / lost).unlink()
    code, violations = audit(str(moved), "--from", "0", "--no-record")
    assert code == 1
    assert [(v["check"], v["batchId"]) for v in violations] == [("files", 1)] and lost in violations[0]["message"], violations


def test_an_entry_added_by_hand_to_an_audited_batch_file_is_found_by_the_next_incremental_run(tmp_path):
    storage = table(tmp_path, "parquet")  # compact interval 3: batch 3's file is after compact file 2
    root = storage.root_uri
    assert audit(root) == (0, [])
    assert audit(root) == (0, [])  # nothing new
    original = storage.read_bytes("_spark_metadata/3")
    again = manifest_lines(storage, "1")[1]
    storage.atomic_write("_spark_metadata/3", "\n".join([*manifest_lines(storage, "3"), again]).encode())
    path = read_ledger(storage, 1).files[0].path
    for _ in range(2):  # the violation stays until the file is put right (the second run also reads the live listing)
        code, violations = audit(root)
        named = [v for v in violations if (v["check"], v["batchId"]) == ("files", 3)]
        assert code == 1 and len(named) == 1, violations
        assert path in named[0]["message"] and "does not name" in named[0]["message"]
        assert "Delete its line from " + storage.uri("_spark_metadata/3") in named[0]["message"]  # what to do, and where
    storage.atomic_write("_spark_metadata/3", original)
    assert audit(root) == (0, [])
    assert audit(root) == (0, [])


def test_a_copied_iceberg_table_gets_a_verdict_naming_its_absolute_metadata_paths_not_a_crash(tmp_path):
    pytest.importorskip("pyiceberg")
    table(tmp_path / "w", "iceberg")
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "w" / "iceberg", copy)
    code, violations = audit(str(copy), "--from", "0", "--no-record")
    assert code == 1, violations
    [v] = [v for v in violations if v["check"] == "formats"]
    assert "Iceberg metadata records absolute locations" in v["message"] and "rewrite_table_path" in v["message"], v
    assert [v for v in violations if v["check"] != "formats"] == []  # the manifest side of the copy is clean


def test_an_older_copy_restored_under_a_newer_audit_mark_is_audited_in_full(tmp_path):
    def back_up_after_batch_1(storage, b):
        if b == 1:
            shutil.copytree(tmp_path / "parquet", tmp_path / "old")  # a backup of batches 0-1

    storage = table(tmp_path, "parquet", batches=6, between=back_up_after_batch_1)
    assert audit(storage.root_uri) == (0, [])  # the mark: audited to batch 5
    old = tmp_path / "old"
    shutil.copy(tmp_path / "parquet" / "_seo" / "audit", old / "_seo" / "audit")
    lost = read_ledger(open_storage(str(old)), 1).files[0].path
    (old / lost).unlink()
    code, violations = audit(str(old))
    assert code == 1 and [(v["check"], v["batchId"]) for v in violations] == [("files", 1)], violations
