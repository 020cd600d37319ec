"""A query whose Python workers cannot import the library fails at ``start`` with an error naming
PYSPARK_PYTHON - not ~15 s into its first batch with "Python worker failed to connect back"."""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

import pytest

from streaming_exactly_once.errors import ConfigError, WorkerPythonError
from streaming_exactly_once.sink import worker_python


def bare_python(directory, name="python3"):
    """An interpreter like a system ``python3``: this Python without site-packages or PYTHONPATH."""
    path = directory / name
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    path.chmod(0o755)
    return path


def connect_session(host="localhost", conf=None):
    return SimpleNamespace(client=SimpleNamespace(host=host), conf=SimpleNamespace(get=lambda k, d=None: (conf or {}).get(k, d)))


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    monkeypatch.setattr(worker_python, "_checked", {})


def test_connect_without_pyspark_python_names_it_at_once(tmp_path, monkeypatch):
    bare_python(tmp_path)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    with pytest.raises(WorkerPythonError, match=r"PYSPARK_PYTHON is not set.*Set PYSPARK_PYTHON=") as info:
        worker_python.check_worker_python(connect_session(), connect=True, needed_for="the sink under Spark Connect")
    assert time.monotonic() - started < 10
    assert isinstance(info.value, ConfigError) and info.value.key == "PYSPARK_PYTHON"
    assert "No module named" in str(info.value)


def test_a_configured_worker_python_is_the_one_checked(tmp_path, monkeypatch):
    bad = bare_python(tmp_path, "py-workers")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    with pytest.raises(WorkerPythonError, match="spark.pyspark.python"):
        worker_python.check_worker_python(connect_session(conf={"spark.pyspark.python": str(bad)}), connect=True, needed_for="x")
    worker_python.check_worker_python(connect_session(), connect=True, needed_for="x")  # PYSPARK_PYTHON: this venv
    assert worker_python.check_worker_python(connect_session(host="spark.example.internal"), connect=True, needed_for="x") is None


def test_a_missing_interpreter_is_named(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/nonexistent/python")
    with pytest.raises(WorkerPythonError, match="/nonexistent/python"):
        worker_python.check_worker_python(connect_session(), connect=True, needed_for="x")


@pytest.mark.spark
def test_direct_mode_start_checks_the_workers_python(spark, tmp_path, monkeypatch):
    """Classic Spark: ``direct`` staging runs the library in the workers, so ``start`` checks their
    Python (here made one without site-packages) before it takes the table."""
    from streaming_exactly_once import ExactlyOnceSink
    from tests.sink.conftest import stream

    bad = bare_python(tmp_path)
    monkeypatch.setattr(worker_python, "worker_python", lambda session, connect: (str(bad), "PYSPARK_PYTHON"))
    (tmp_path / "in").mkdir()
    sink = ExactlyOnceSink(str(tmp_path / "t"), staging_mode="direct")
    with pytest.raises(WorkerPythonError, match="staging_mode='direct'.*PYSPARK_PYTHON"):
        sink.start(stream(spark, tmp_path / "in"), checkpoint_location=str(tmp_path / "chk"))
    assert not (tmp_path / "t" / "_seo").exists()  # refused before it took the table
    rename = ExactlyOnceSink(str(tmp_path / "t2"))  # rename mode: Spark's own writer, no Python in the workers
    query = rename.start(stream(spark, tmp_path / "in"), checkpoint_location=str(tmp_path / "chk2"), trigger={"availableNow": True})
    query.awaitTermination()
    rename.stop("10s")
