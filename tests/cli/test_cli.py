"""The ``seo`` command against tables built in the tests: every command, ``--json``, error paths."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once.cli.main import main
from streaming_exactly_once.config import load_job_config, redacted
from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.sink.keywords import conf_keys
from streaming_exactly_once.testing.faults import InjectedFailure
from tests.commit.helpers import make_committer, stage_and_commit
from tests.readers.tables import retired

REPO = Path(__file__).resolve().parents[2]
Q = "88888888-8888-8888-8888-888888888888"


def seo(capsys, *args):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def table(tmp_path):
    """A table of 5 batches with real Parquet files, written through the commit protocol."""
    from streaming_exactly_once.commit.committer import StagedFile
    from streaming_exactly_once.storage import open_storage

    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=3)
    c.open()
    for b in range(5):
        attempt = c.begin(Q, b, mode="rename")
        rel = f"p=v{b % 2}/part-{b}.parquet"
        staged = f"{attempt.staging_dir}/data/{rel}"
        (tmp_path / "t" / staged).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": list(range(b * 3, b * 3 + 3))}), tmp_path / "t" / staged)
        info = storage.info(staged)
        c.commit(attempt, [StagedFile(rel, info.size, info.mtime_ms, staged)], num_rows=3)
    c.close()
    return tmp_path / "t"


def test_status_log_files_read_index(capsys, table):
    code, out, _ = seo(capsys, "status", str(table))
    assert code == 0 and "latest batch" in out and "released" in out and Q in out
    code, out, _ = seo(capsys, "--json", "status", str(table))
    info = json.loads(out)
    assert info["latestBatchId"] == 4 and info["files"] == 5 and info["rows"] == 15 and info["lease"]["alive"] is False
    code, out, _ = seo(capsys, "log", str(table))
    assert code == 0 and out.count("\n") >= 7
    code, out, _ = seo(capsys, "log", str(table), "--kind", "commits", "--batch", "4", "--json")
    assert json.loads(out)["records"][-1]["sparkBatchId"] == 4
    code, out, _ = seo(capsys, "log", str(table), "--kind", "sources", "--json")
    assert [r["batch"] for r in json.loads(out)] == [0, 1, 2, 3, 4]
    code, out, _ = seo(capsys, "files", str(table), "--as-of", "1", "--json")
    assert len(json.loads(out)["files"]) == 2
    code, out, _ = seo(capsys, "read", str(table), "--limit", "4")
    assert code == 0 and "4 of 15 rows" in out
    code, out, _ = seo(capsys, "read", str(table), "--json", "--as-of", "0")
    assert sorted(r["id"] for r in json.loads(out)) == [0, 1, 2]
    code, out, _ = seo(capsys, "index", str(table), "--json")
    assert json.loads(out)["indexed"] == [2]


def test_verify_exit_codes(capsys, table):
    code, out, _ = seo(capsys, "verify", str(table))
    assert code == 0 and "OK" in out
    pq.write_table(pa.table({"id": [99]}), table / "p=v0" / "foreign.parquet")
    code, out, _ = seo(capsys, "verify", str(table))
    assert code == 3 and "foreign-file" in out and "no record shows this sink wrote" in out
    os.remove(next((table / "p=v1").glob("part-1.parquet")))
    code, out, _ = seo(capsys, "--json", "verify", str(table))
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and any(p["kind"] == "missing-file" for p in report["problems"])


def test_gc_respects_age_and_dry_run(capsys, table):
    orphan = table / "p=v0" / "orphan.parquet"
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [99]}), buf)
    retired(table, "p=v0/orphan.parquet", buf.getvalue(), left_ms=int(time.time() * 1000))  # it left the listing just now
    foreign = table / "p=v0" / "foreign.parquet"
    pq.write_table(pa.table({"id": [98]}), foreign)
    stale = table / "_seo" / "staging" / "9-deadbeef" / "data"
    stale.mkdir(parents=True)
    (stale / "x.parquet").write_bytes(b"x")
    code, out, _ = seo(capsys, "gc", str(table), "--older-than", "1h")
    assert code == 0 and orphan.exists() and "kept" in out  # too young: could be an in-flight batch
    old = time.time() - 7200
    for p in (orphan, foreign, stale / "x.parquet", stale, stale.parent):
        os.utime(p, (old, old))
    code, out, _ = seo(capsys, "gc", str(table), "--dry-run")
    assert f"would delete file://{orphan}" not in out and "1 younger than 1h kept" in out  # old, but it left the listing a moment ago
    (table / "_seo" / "retired" / "9").unlink()
    retired(table, "p=v0/orphan.parquet", None, batch_id=3, left_ms=int(old * 1000))  # as if it left two hours ago
    code, out, _ = seo(capsys, "gc", str(table), "--dry-run")
    assert f"would delete file://{orphan}" in out and orphan.exists()
    code, out, _ = seo(capsys, "--json", "gc", str(table))
    result = json.loads(out)
    assert len(result["orphans"]) == 1 and len(result["staging"]) == 1 and not orphan.exists()
    assert [f["uri"] for f in result["foreign"]] == [f"file://{foreign}"] and foreign.exists()
    assert not (table / "_seo" / "retired" / "3").exists()  # spent: no file it names is left
    code, out, _ = seo(capsys, "verify", str(table))
    assert code == 3 and "foreign-file" in out and "orphan" not in out
    foreign.unlink()
    code, _, _ = seo(capsys, "verify", str(table))
    assert code == 0


def test_recover_and_its_repairs(capsys, table):
    from streaming_exactly_once.storage import open_storage

    storage = open_storage(str(table))
    failing = make_committer(storage, compact_interval=3, fail_at="after-wal@1")
    with pytest.raises(InjectedFailure):
        stage_and_commit(failing, Q, 5, [100, 101])
    failing.close()
    code, out, _ = seo(capsys, "status", str(table), "--json")
    assert json.loads(out)["pendingCommits"] == [5]
    code, out, _ = seo(capsys, "--json", "recover", str(table))
    assert code == 0 and json.loads(out)["recovery"]["rolledForward"] == [5]
    code, out, err = seo(capsys, "recover", str(table), "--discard-wal", "5")
    assert code == 1 and "published" in err and err.count("\n") == 1
    os.remove(table / "_seo" / "commits" / "5.compact")
    code, out, err = seo(capsys, "verify", str(table))
    assert code == 1
    code, out, _ = seo(capsys, "recover", str(table), "--rebuild-logs")
    assert code == 0 and "rebuilt" in out
    code, _, _ = seo(capsys, "verify", str(table))
    assert code == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["status", "/no/such/table"], "No table at"),
        (["files", "/tmp/*"], "glob"),
        (["verify", "s3nope://x/y"], "not supported"),
        (["gc", "{table}", "--older-than", "soon"], "duration"),
        (["run", "no_such_job"], "Available jobs"),
        (["run", "landing_to_parquet", "--conf", "/no/such.toml"], "does not exist"),
        (["run", "landing_to_parquet", "--set", "sink.tabel=x"], "Valid keys"),
        (["run", "landing_to_parquet", "--set", "nonsense"], "section.key=value"),
    ],
)
def test_errors_are_one_line_and_nonzero(capsys, table, monkeypatch, args, message):
    monkeypatch.chdir(REPO)
    args = [a.replace("{table}", str(table)) for a in args]
    code, out, err = seo(capsys, *args)
    assert code == 1, (code, out, err)
    assert message in err and err.startswith("error: ") and err.count("\n") == 1, err


def test_usage_error_exit_code(capsys):
    code, _, err = seo(capsys, "files")
    assert code == 2 and "Missing argument" in err


def test_corrupt_manifest_is_named(capsys, table):
    (table / "_spark_metadata" / "4").write_bytes(b"")
    code, _, err = seo(capsys, "files", str(table))
    assert code == 1 and "_spark_metadata/4" in err and "empty" in err


def test_config_precedence_validation_and_secrets(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text('[sink]\ntable = "from-file"\ncompact_interval = 5\n[storage]\nsecret = "hunter2"\n')
    spec = {"sink": conf_keys()}
    env = {"SEO_SINK__TABLE": "from-env", "SEO_SINK__COMPACT_INTERVAL": "7"}
    config = load_job_config(conf, spec=spec, environ=env, overrides=["sink.compact_interval=3"])
    assert config["sink"]["table"] == "from-env" and config["sink"]["compact_interval"] == 3
    assert load_job_config(conf, spec=spec, environ={})["sink"]["table"] == "from-file"
    assert redacted(config)["storage"]["secret"] == "***"
    with pytest.raises(ConfigError, match="Valid keys: .*checkpoint"):
        load_job_config(conf, spec=spec, environ={"SEO_SINK__PARTITON_BY": "x"})
    with pytest.raises(ConfigError, match="compact_interval must be an integer"):
        load_job_config(conf, spec=spec, environ={}, overrides=["sink.compact_interval=ten"])
    conf.write_text("[sink\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_job_config(conf, spec=spec, environ={})
    conf.write_text("[sinks]\n")
    with pytest.raises(ConfigError, match="sections"):
        load_job_config(conf, spec=spec, environ={})


def test_cli_imports_without_pyspark(table):
    code = "import sys; sys.modules['pyspark'] = None\nfrom streaming_exactly_once.cli.main import main\nmain(['status', sys.argv[1]])"
    out = subprocess.run([sys.executable, "-c", code, str(table)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "latest batch" in out.stdout, out.stderr


def _clean_copy(dest: Path) -> Path:
    ignore = shutil.ignore_patterns(".venv", ".work", ".git", "__pycache__", "*.egg-info", "results", ".pytest_cache")
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


@pytest.mark.spark
@pytest.mark.long
def test_multi_dataset_job_with_strict_checks(tmp_path):
    """The dataset-group job, with a row check that quarantines refunds and the full policy."""
    copy = _clean_copy(tmp_path / "repo")
    seo_bin = str(Path(sys.executable).parent / "seo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEO_")}
    env["PYTHONPATH"] = ""
    out = subprocess.run(
        [seo_bin, "run", "landing_to_datasets", "--conf", "datasets", "--set", "datasets.row_checks=event_type <> 'refund'"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "rows in all/                   2000" in out.stdout and "verified                       True" in out.stdout
    status = subprocess.run([seo_bin, "status", ".work/datasets/lake", "--json"], cwd=copy, capture_output=True, text=True, timeout=60)
    info = json.loads(status.stdout)
    refund = info["tables"]["by_type/refund"]  # every refund failed the row check: no table, counted
    assert refund["status"] == "quarantined" and "batchId" not in refund and refund["quarantinedRows"] > 0
    assert info["quarantineTables"].get("_quarantine/rows/by_type/refund") is not None
    assert info["tables"]["by_type/click"]["status"] == "committed"
    strict = subprocess.run(
        [
            seo_bin,
            "run",
            "landing_to_datasets",
            "--conf",
            "datasets",
            "--set",
            "datasets.min_rows=100000",
            "--set",
            "datasets.policy=full",
            "--set",
            "sink.table=.work/strict",
            "--set",
            "sink.checkpoint=.work/strict-ckpt",
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert strict.returncode != 0 and "BatchRejectedError" in strict.stdout + strict.stderr
    assert not list((copy / ".work" / "strict").rglob("_spark_metadata"))


@pytest.mark.spark
def test_ctrl_c_stops_gracefully_and_rate_job(tmp_path):
    copy = _clean_copy(tmp_path / "repo")
    seo_bin = str(Path(sys.executable).parent / "seo")
    proc = subprocess.Popen(
        [
            seo_bin,
            "run",
            "rate_to_partitioned",
            "--conf",
            "rate",
            "--set",
            "source.duration=120s",
            "--set",
            "source.rows_per_second=200",
            "--set",
            "trigger.interval=1 second",
            "--set",
            "sink.metrics_path=metrics.jsonl",
        ],
        cwd=copy,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if sum(1 for ln in lines if ln.startswith("batch ")) >= 2:
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=120)
    output = "".join(lines) + rest
    assert proc.returncode == 0, output[-3000:]
    assert "stopped" in output
    events = [json.loads(ln) for ln in (copy / "metrics.jsonl").read_text().splitlines()]
    assert events and all(e["event"] == "batch_committed" and "stepMs" in e for e in events)
    check = subprocess.run([seo_bin, "verify", ".work/rate/table"], cwd=copy, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_deeply_nested_log_file_is_one_line_too(table):
    """r06c: a deeply nested _seo/table printed a 46-line RecursionError traceback."""
    (table / "_seo" / "table").write_bytes(b'v1\n{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    seo_bin = str(Path(sys.executable).parent / "seo")
    out = subprocess.run([seo_bin, "status", str(table)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: Corrupt log file") and "_seo/table" in out.stderr and "nests deeper" in out.stderr


def test_unexpected_errors_are_one_line_and_debug_shows_the_traceback(capsys, table, monkeypatch):
    import streaming_exactly_once.maintenance.status as status_module

    def broken(storage):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(status_module, "table_status", broken)
    code, _, err = seo(capsys, "status", str(table))
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: unexpected RecursionError") and "--debug" in err, err
    code, _, err = seo(capsys, "--debug", "status", str(table))
    assert code == 1 and "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("error: unexpected")
    monkeypatch.setenv("SEO_DEBUG", "1")
    code, _, err = seo(capsys, "status", str(table))
    assert code == 1 and "Traceback (most recent call last)" in err


@pytest.mark.parametrize("log_dir", ["_spark_metadata", "_seo/commits"])
def test_a_stray_batch_file_is_named_at_once(table, log_dir):
    """r15: `_spark_metadata/100000000000` made committer.open() and `seo verify` enumerate
    10**11 batch ids for hours."""
    (table / log_dir / "100000000000").write_text("v1")
    seo_bin = str(Path(sys.executable).parent / "seo")
    opener = (
        "import sys\nfrom tests.commit.helpers import make_committer\nfrom streaming_exactly_once.storage import open_storage\n"
        "make_committer(open_storage(sys.argv[1]), compact_interval=3).open()"
    )
    commands = [[seo_bin, "verify", "--no-orphans", str(table)], [seo_bin, "files", str(table)]]
    if log_dir == "_spark_metadata":  # (committer.open reads the commits snapshot before it looks for gaps)
        commands += [[sys.executable, "-c", opener, str(table)], [seo_bin, "status", str(table)]]
    for command in commands:
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, (command, out.stdout, out.stderr)
        assert f"{log_dir}/100000000000" in out.stdout + out.stderr and "a stray file? move it away" in out.stdout + out.stderr
