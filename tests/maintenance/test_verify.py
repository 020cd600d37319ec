"""``seo verify`` reports what readers and gc would refuse, and calls nothing an orphan that gc keeps."""

from __future__ import annotations

import json

from tests.cli.test_cli import seo
from tests.readers.tables import parquet_bytes, retired, write_group, write_table


def test_a_link_out_of_the_table_is_an_error(capsys, tmp_path):
    root = tmp_path / "t"
    write_table(str(root))
    secret = tmp_path / "secret.parquet"
    secret.write_bytes(parquet_bytes([1]))
    (root / "p=a" / "evil.parquet").symlink_to(secret)
    line = '{"path":"file://%s/p=a/evil.parquet","size":%d,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}'
    (root / "_spark_metadata" / "2").write_text("v1\n" + line % (root, secret.stat().st_size))
    code, out, _ = seo(capsys, "--json", "verify", "--no-orphans", str(root))
    problems = json.loads(out)["problems"]
    links = [p for p in problems if p["kind"] == "symlink-outside-root"]
    assert code == 1 and len(links) == 1 and str(secret) in links[0]["detail"] and links[0]["path"].endswith("p=a/evil.parquet")


def test_group_verify_skips_nested_tables_and_files_outside_tables(capsys, tmp_path):
    root = tmp_path / "lake"
    write_group(str(root), {"orders": [1], "orders/eu": [2]})
    (root / "notes.parquet").write_bytes(b"not a table's")
    code, out, _ = seo(capsys, "--json", "verify", str(root))
    assert code == 0, out
    retired(root / "orders", "day=1/orphan.parquet", parquet_bytes([3]))
    (root / "orders" / "day=1" / "foreign.parquet").write_bytes(parquet_bytes([4]))
    code, out, _ = seo(capsys, "--json", "verify", str(root))
    problems = sorted((p["kind"], p["path"].rsplit("/", 3)[-3:]) for p in json.loads(out)["problems"])
    assert code == 3 and problems == [("foreign-file", ["orders", "day=1", "foreign.parquet"]), ("orphan", ["orders", "day=1", "orphan.parquet"])]


def test_a_torn_record_of_a_batch_with_a_pending_claim_is_a_warning_and_recover_rewrites_it(tmp_path):
    """A commit writes the offsets and sources records without waiting for the disk: until the
    janitor syncs them and deletes the claim, a power cut can cut them short. verify says so,
    as a warning naming the command, and not as corruption pointing at backups."""
    from streaming_exactly_once.maintenance.verify import verify_table
    from streaming_exactly_once.storage.local import LocalStorage
    from tests.commit.helpers import make_committer, stage_and_commit
    from tests.commit.test_commit_overlap import QUERY, NotingDurability

    committer = make_committer(NotingDurability(str(tmp_path), fail_syncs_of="_seo/offsets/"))
    stage_and_commit(committer, QUERY, 0, [1])
    committer.close()  # the claim stays: its records could not be made durable
    intact = (tmp_path / "_seo" / "sources" / "0").read_bytes()
    (tmp_path / "_seo" / "sources" / "0").write_bytes(b"\0" * 9)
    report = verify_table(LocalStorage(str(tmp_path)))
    kinds = {(p.severity, p.kind) for p in report.problems}
    assert ("warning", "pending-record") in kinds and ("error", "log-corrupt") not in kinds, report.problems
    assert any("seo recover" in p.detail for p in report.problems if p.kind == "pending-record")
    assert make_committer(LocalStorage(str(tmp_path))).open().rolled_forward == [0]
    assert (tmp_path / "_seo" / "sources" / "0").read_bytes() == intact


def test_a_crashed_commit_the_next_start_completes_is_a_warning_not_an_error(tmp_path):
    """A writer killed right after publishing a batch, its commit record and sources record
    not yet written, its claim pending: the very state every crash there leaves, and the next
    start (or `seo recover`) completes it. verify says so as warnings (exit 3), as it does for a
    Delta log that is behind by a pending batch - not as errors (exit 1) about damaged logs."""
    from streaming_exactly_once.maintenance.verify import verify_table
    from streaming_exactly_once.storage import open_storage
    from streaming_exactly_once.testing.faults import InjectedFailure
    from tests.commit.helpers import make_committer, stage_and_commit

    storage = open_storage(str(tmp_path / "t"))
    writer = make_committer(storage)
    stage_and_commit(writer, "q", 0, [1, 2])
    writer.close()
    dying = make_committer(storage, fail_at="after-manifest")
    try:
        stage_and_commit(dying, "q", 1, [3, 4])
    except InjectedFailure:
        pass
    dying.lease.release()  # its process is gone
    report = verify_table(storage)
    assert not report.errors, [p.to_json() for p in report.errors]
    assert any(p.kind == "pending-wal" for p in report.warnings), [p.to_json() for p in report.problems]
    assert make_committer(storage).open().rolled_forward == [1]
    assert verify_table(storage).problems == []
