"""What a new user met in the CLI: one JSON key style (checked against the documented schemas),
``--version``, exact values in ``seo read``, ``gc --dry-run`` beside a live writer, verify's
grouped summary, progress only at a terminal, ``status`` of a Delta table, packaged jobs."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once import __version__
from streaming_exactly_once.cli import progress
from streaming_exactly_once.cli.job_runner import PACKAGED_JOBS, find_conf, find_job
from streaming_exactly_once.storage import open_storage
from tests.cli.test_cli import (
    Q,
    seo,
    table as table,  # noqa: F401 - the fixture
)
from tests.commit.helpers import make_committer, stage_file
from tests.readers.tables import retired

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "docs" / "cli" / "schemas"
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def test_version(capsys):
    code, out, _ = seo(capsys, "--version")
    assert code == 0 and out.strip() == f"seo (streaming-exactly-once) {__version__}"


@pytest.mark.parametrize(
    ("schema", "args"),
    [
        ("status", ["status", "{t}"]),
        ("log", ["log", "{t}"]),
        ("log-files", ["log", "{t}", "--kind", "offsets"]),
        ("log-batch", ["log", "{t}", "--kind", "commits", "--batch", "1"]),
        ("files", ["files", "{t}"]),
        ("verify", ["verify", "{t}"]),
        ("audit", ["audit", "{t}"]),
        ("recover", ["recover", "{t}", "--rebuild-logs"]),
        ("gc", ["gc", "{t}", "--dry-run"]),
        ("compact", ["compact", "{t}", "--dry-run", "--min-age", "0s", "--min-files", "2"]),
        ("compact", ["compact", "{t}", "--min-age", "0s", "--min-files", "2"]),
        ("read", ["read", "{t}"]),
        ("index", ["index", "{t}"]),
    ],
)
def test_every_json_document_matches_its_documented_schema(capsys, table, schema, args):  # noqa: F811
    jsonschema = pytest.importorskip("jsonschema")
    code, out, err = seo(capsys, "--json", *[a.replace("{t}", str(table)) for a in args])
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, json.loads((SCHEMAS / f"{schema}.json").read_text()))
    items = document if isinstance(document, list) else [document]
    if schema != "read":  # rows are keyed by column names
        for item in items:
            assert all(CAMEL.match(k) for k in item), sorted(item)


def test_read_prints_exact_values(capsys, tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage)
    c.open()
    attempt = c.begin(Q, 0, mode="rename")
    buf = io.BytesIO()
    pq.write_table(pa.table({"value": [0.043397, 0.407848, 1e-12], "name": ["a", None, "c"]}), buf)
    staged = stage_file(storage, attempt, "part-0.parquet", buf.getvalue())
    c.commit(attempt, [staged], num_rows=3)
    c.close()
    code, out, _ = seo(capsys, "read", str(tmp_path / "t"))
    assert code == 0 and "0.043397" in out and "0.407848" in out and "1e-12" in out and "null" in out, out


def test_gc_dry_run_beside_a_live_writer(capsys, table):  # noqa: F811
    writer = make_committer(open_storage(str(table)), heartbeat=True, compact_interval=3)
    writer.open()
    try:
        code, out, err = seo(capsys, "gc", str(table))
        assert code == 1 and "stop the query" in err
        retired(table, "p=v0/orphan.parquet", b"x")
        code, out, err = seo(capsys, "gc", str(table), "--dry-run", "--older-than", "0s")
        assert code == 0 and "a writer is live" in out and "would delete" in out and "orphan.parquet" in out, out + err
        assert (table / "p=v0" / "orphan.parquet").exists()
        code, out, _ = seo(capsys, "--json", "gc", str(table), "--dry-run")
        assert json.loads(out)["writerLive"] is True
    finally:
        writer.close()


def test_verify_summarises_by_kind_and_all_lists_every_problem(capsys, table):  # noqa: F811
    for i in range(12):
        (table / "p=v1" / f"foreign-{i:02d}.parquet").write_bytes(b"x")
    code, out, _ = seo(capsys, "verify", str(table))
    assert code == 3
    assert re.search(r"warning\s+foreign-file\s+12", out) and "warning foreign-file (12):" in out, out
    assert out.count("foreign-0") + out.count("foreign-1") == 5 and "... and 7 more" in out and "`seo verify --all`" in out
    code, out, _ = seo(capsys, "verify", str(table), "--all")
    assert code == 3 and out.count("foreign-0") + out.count("foreign-1") == 12 and "more" not in out
    code, out, _ = seo(capsys, "--json", "verify", str(table))
    assert json.loads(out)["kinds"] == {"foreign-file": 12} and len(json.loads(out)["problems"]) == 12


def test_progress_shows_only_at_a_terminal_and_never_for_json(capsys, table):  # noqa: F811
    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert progress.wanted(False, Tty()) and not progress.wanted(True, Tty()) and not progress.wanted(False, io.StringIO())
    code, _, err = seo(capsys, "verify", str(table))  # stderr is captured, not a terminal: nothing there
    assert code == 0 and err == ""
    steps = []
    with progress.activity("verify", show=False) as tell:
        tell("step")
    from streaming_exactly_once.maintenance.verify import verify_table

    verify_table(open_storage(str(table)), progress=steps.append)
    assert steps[0].startswith("reading the logs") and any(s.startswith("checking") for s in steps) and "listing storage for orphan files" in steps


def test_status_of_a_delta_table_shows_both_formats_and_the_app_id(capsys, tmp_path):
    pytest.importorskip("deltalake")
    from tests.delta.helpers import commit_batch, delta_committer

    c = delta_committer(open_storage(str(tmp_path / "d")))
    commit_batch(c, Q, 0, [1, 2, 3, 4])
    c.close()
    code, out, err = seo(capsys, "status", str(tmp_path / "d"))
    assert code == 0, err
    assert re.search(r"format\s+delta \(parquet files; _delta_log and _spark_metadata\)", out), out
    assert re.search(r"delta\s+version 0, holds batches up to 0; app id streaming-exactly-once:", out), out


def test_run_finds_the_packaged_jobs_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_job("landing_to_parquet", None) == PACKAGED_JOBS / "landing_to_parquet.py"
    assert find_conf(None).name == "local.toml" and find_conf("delta").name == "delta.toml" and find_conf("conf/datasets.toml").is_file()
    out = subprocess.run([sys.executable, "-m", "streaming_exactly_once.cli.main", "run", "nope"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and "landing_to_parquet" in out.stderr and "_spark_session" not in out.stderr, out.stderr
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "landing_to_parquet.py").write_text("def run(config, **kw):\n    return {}\n")
    assert find_job("landing_to_parquet", None) == Path("jobs/landing_to_parquet.py")  # a project's own job first
