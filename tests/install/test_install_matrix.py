"""CI installs what users install: clean virtualenvs built from the project's own files (a copy
of it as a fresh clone has it), with the README's install line as written (``venvs``).

* ``make demo`` on that fresh clone: the Makefile makes its ``.venv`` with ``[spark,arrow]``
  only and runs the demo job end to end;
* the README's install line, ``pip install '.[spark,arrow]'``, then the README's quickstart run
  as written (only its directory moved) and ``seo`` on its table;
* that install plus each one of ``[delta]``, ``[iceberg]``, ``[s3]``, ``[polars]``, ``[duckdb]``:
  a two-batch smoke of what the extra enables, and every other extra's feature refused with its
  ``pip install`` line (``smoke.py``).

(The built wheel with its real dependencies: ``test_wheel.py``.) Sizes and install times go to
``.work/install-matrix.json``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.install import venvs

pytestmark = [pytest.mark.install, pytest.mark.spark]

EXTRAS = ("delta", "iceberg", "s3", "polars", "duckdb")


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return venvs.copy_source(tmp_path_factory.mktemp("clone") / "streaming-exactly-once")


@pytest.fixture(scope="module")
def base(clone, tmp_path_factory) -> Path:
    """A venv with the README's install line, ``pip install '.[spark,arrow]'``."""
    line = venvs.readme_install_lines()[0]
    assert line == "pip install '.[spark,arrow]'", "the README's first install line changed: update this matrix with it"
    venv = venvs.create(tmp_path_factory.mktemp("venvs") / "spark-arrow", line, clone, "[spark,arrow]")
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture(scope="module")
def demo(clone) -> tuple[str, Path]:
    """``make demo`` in the fresh clone: its venv, then the job. (Output, the demo's table.)"""
    env = venvs.pip_env()
    started = time.monotonic()
    made = subprocess.run(["make", "demo-venv"], cwd=clone, env=env, capture_output=True, text=True, timeout=1200)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    venvs.record("make demo's .venv", line="make demo-venv", seconds=time.monotonic() - started, megabytes=venvs.megabytes(clone / ".venv"))
    env["JAVA_TOOL_OPTIONS"] = venvs.JVM_OPTIONS
    done = subprocess.run(["make", "demo"], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, clone / ".work" / "quickstart" / "events"


def test_the_venv_of_make_demo_has_only_spark_and_arrow(clone, demo):
    python = clone / ".venv" / "bin" / "python"
    code = "import json; from streaming_exactly_once import extras; print(json.dumps([k for k in extras.FEATURES if not extras.missing(k)]))"
    done = venvs.run(python.parent.parent, ["python", "-c", code], cwd=clone.parent)
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(done.stdout)) == ["arrow", "pandas", "spark"]


def test_make_demo_runs_the_job_end_to_end_on_a_fresh_clone(clone, demo):
    output, table = demo
    assert output.count("\nbatch ") == 4, output
    assert "rows in table    2000" in output and "duplicates       0" in output and "verified         True" in output, output
    for command in (["status"], ["verify"], ["gc", "--dry-run"], ["compact", "--dry-run"]):
        done = venvs.run(clone / ".venv", ["seo", *command, str(table)], cwd=clone)
        assert done.returncode == 0, f"seo {command}: {done.stdout}{done.stderr}"


def test_the_readme_quickstart_runs_in_the_readme_install(base, tmp_path):
    table = venvs.run_quickstart(base, tmp_path)
    verify = venvs.run(base, ["seo", "verify", str(table)], cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize("extra", EXTRAS)
def test_each_extra_on_top_of_the_readme_install(extra, base, clone, demo, tmp_path, request):
    venv = venvs.extend(base, tmp_path / f"spark-arrow-{extra}", f"pip install '.[spark,arrow,{extra}]'", clone, f"[spark,arrow,{extra}]")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(demo[1], work / "table")
    options = {}
    if extra == "s3":
        options = {**request.getfixturevalue("s3_options"), "bucket": request.getfixturevalue("s3_bucket")}
    smoke = tmp_path / "smoke.py"  # run from here: nothing of the checkout on the venv's path
    shutil.copy(Path(__file__).with_name("smoke.py"), smoke)
    done = venvs.run(venv, ["python", str(smoke), extra, str(work), json.dumps(options)], cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["seen"]["rows"] in (20, 2000), result
    others = {"delta", "iceberg", "s3", "azure", "gcs", "polars", "duckdb"} - {extra}
    assert set(result["refused"]) == others, result
    shutil.rmtree(venv, ignore_errors=True)
