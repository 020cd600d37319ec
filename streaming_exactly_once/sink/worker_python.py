"""Can Spark's Python workers import this library? Asked before a query starts, not after 15 s.

Spark runs Python code outside the driver's interpreter: under Spark Connect the whole sink runs
in a ``foreachBatch`` worker of the server, and in ``direct`` staging and dataset groups the
workers write the files (``mapInArrow``). Those workers run ``spark.pyspark.python``, else
``PYSPARK_PYTHON``, else ``python3`` on the ``PATH`` - not the driver's interpreter. When that
Python lacks the library, Spark's error comes late and says little: under Connect the first
batch fails after about 15 s with "Python worker failed to connect back".

Where the workers run on this machine (a ``local`` master, or a Connect server on localhost)
``sink.start`` runs that interpreter once with an import of what the workers need and raises
``WorkerPythonError`` naming ``PYSPARK_PYTHON`` if it fails. On a remote cluster the workers'
Python cannot be reached from here; the batch's own error is then the signal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

from ..errors import WorkerPythonError

#: What a worker imports: the library and pyspark; Connect's foreachBatch worker also pandas
#: and pyarrow (pyspark's Connect support needs them).
WORKER_MODULES = ("streaming_exactly_once", "pyspark")
CONNECT_MODULES = (*WORKER_MODULES, "pandas", "pyarrow")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
_checked: dict[tuple[str, tuple[str, ...]], str | None] = {}


def _conf(session: Any, key: str) -> str | None:
    try:
        value = session.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a session that cannot say: assume unset
        return None
    return str(value) if value else None


def worker_python(session: Any, *, connect: bool) -> tuple[str, str] | None:
    """``(interpreter, where it came from)`` of the session's Python workers when they run on this
    machine; None when they run elsewhere (nothing to check from here)."""
    if connect:
        host = str(getattr(getattr(session, "client", None), "host", "") or "")
        if host not in _LOCAL_HOSTS:
            return None
    else:
        try:
            sc = session.sparkContext
            if not str(sc.master).startswith("local"):
                return None
            return str(sc.pythonExec), "the SparkContext's pythonExec (PYSPARK_PYTHON when it started)"
        except Exception:  # noqa: BLE001
            return None
    configured = _conf(session, "spark.pyspark.python")
    if configured:
        return configured, "spark.pyspark.python"
    if os.environ.get("PYSPARK_PYTHON"):
        return os.environ["PYSPARK_PYTHON"], "PYSPARK_PYTHON"
    return "python3", "the default (PYSPARK_PYTHON is not set)"


def import_failure(interpreter: str, modules: tuple[str, ...], *, timeout_s: float = 60.0) -> str | None:
    """Why ``interpreter`` cannot import ``modules`` (its last line of error), or None if it can.
    Remembered per interpreter for the life of the process."""
    key = (interpreter, modules)
    if key in _checked:
        return _checked[key]
    exe = shutil.which(interpreter) or interpreter
    try:
        proc = subprocess.run([exe, "-c", "import " + ", ".join(modules)], capture_output=True, text=True, timeout=timeout_s, check=False)
        failure = None if proc.returncode == 0 else ((proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1])
    except FileNotFoundError:
        failure = f"{interpreter!r} is not an executable on the PATH"
    except (OSError, subprocess.TimeoutExpired) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    _checked[key] = failure
    return failure


def check_worker_python(session: Any, *, connect: bool, needed_for: str) -> None:
    """``WorkerPythonError`` if the session's local Python workers cannot import the library."""
    found = worker_python(session, connect=connect)
    if found is None:
        return
    interpreter, source = found
    failure = import_failure(interpreter, CONNECT_MODULES if connect else WORKER_MODULES)
    if failure is None:
        return
    raise WorkerPythonError(
        f"Spark's Python workers run {interpreter!r} ({source}), which cannot import what {needed_for} needs there: "
        f"{failure}. Set PYSPARK_PYTHON={sys.executable} (this Python) before the SparkSession"
        f"{' and its Connect server' if connect else ''} start, or spark.pyspark.python, or install "
        "streaming-exactly-once into the workers' Python.",
        key="PYSPARK_PYTHON",
        interpreter=interpreter,
    )
