"""Every code example of the documentation site runs: the files in docs/examples, which the pages
include, in the order a reader meets them (the quickstart writes the table the others read)."""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"
WORKDIR = Path("/tmp/seo-example")  # the path the examples use, so readers can copy them as they are
ORDER = [
    "quickstart.py",
    "read_spark.py",
    "read_pandas.py",
    "read_arrow.py",
    "read_polars.py",
    "read_duckdb.py",
    "read_table.py",
    "time_travel.py",
    "delta.py",
    "iceberg.py",
    "datasets.py",
    "compaction.py",
    "kafka_offline.py",
    "migrate_file_sink.py",
]


def test_every_example_is_run_here():
    assert sorted(ORDER + ["operations.sh"]) == sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".py", ".sh"))


def test_every_example_is_on_a_page():
    pages = "".join(p.read_text() for p in (REPO / "docs").rglob("*.md"))
    for name in [*ORDER, "operations.sh"]:
        assert f'--8<-- "docs/examples/{name}"' in pages, name


@pytest.mark.spark
def test_the_examples_run(spark, capsys):
    shutil.rmtree(WORKDIR, ignore_errors=True)
    for name in ORDER:
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    assert "2026-01-02" in out and "12.0" in out
    assert "2 live files for 6 rows" in out  # compaction.py: batches 0-1 rewritten at 2, that file and 2-4 at 5
    assert "12 records, each once: True" in out  # kafka_offline.py: a lost checkpoint re-read from earliest
    assert "12 rows, each of ids 0-11 once: True" in out  # migrate_file_sink.py: moved, then the checkpoint lost
    seo = shutil.which("seo", path=str(Path(sys.executable).parent)) or "seo"
    env = {**os.environ, "PATH": f"{Path(seo).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", str(EXAMPLES / "operations.sh")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "OK - batch 0" in done.stdout and (WORKDIR / "status.json").read_text().startswith("{")
