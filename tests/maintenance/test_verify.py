"""``seo verify`` reports what readers and gc would refuse, and calls nothing an orphan that gc keeps."""

from __future__ import annotations

import json

from tests.cli.test_cli import seo
from tests.readers.tables import parquet_bytes, write_group, write_table


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
    (root / "orders" / "day=1" / "orphan.parquet").write_bytes(parquet_bytes([3]))
    code, out, _ = seo(capsys, "--json", "verify", str(root))
    problems = json.loads(out)["problems"]
    assert code == 3 and [(p["kind"], p["path"].rsplit("/", 3)[-3:]) for p in problems] == [("orphan", ["orders", "day=1", "orphan.parquet"])]
