"""The SparkSession every job uses: settings from the config's [spark] section over safe defaults."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULTS = {
    "master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}


def build_spark(settings: Mapping[str, Any], app_name: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this venv's Python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import signal
    import threading

    from pyspark.sql import SparkSession

    # PySpark replaces the SIGINT handler with one that cancels all jobs; keep the runner's
    # (the first Ctrl-C stops the query gracefully) if there is one.
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main_thread else None
    conf = {**DEFAULTS, **{str(k): str(v) for k, v in settings.items()}}
    builder = SparkSession.builder.appName(app_name).master(conf.pop("master"))
    log_level = conf.pop("log_level", "ERROR")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if callable(previous) and previous is not signal.default_int_handler:
        signal.signal(signal.SIGINT, previous)
    return spark


def trigger_of(section: Mapping[str, Any]) -> dict[str, Any]:
    mode = section.get("mode", "availableNow")
    if mode == "availableNow":
        return {"availableNow": True}
    if mode == "processingTime":
        return {"processingTime": section.get("interval", "5 seconds")}
    from streaming_exactly_once.errors import ConfigError

    raise ConfigError(f"[trigger] mode must be 'availableNow' or 'processingTime', got {mode!r}", key="trigger.mode")


def wait(query, sink, stop, say) -> None:
    """Wait for the query to finish, or stop it gracefully when ``stop`` is set (Ctrl-C)."""
    while query.isActive and not stop.is_set():
        stop.wait(0.2)
    if stop.is_set() and query.isActive:
        sink.stop()
        say("stopped: the last batch was committed or rolled back, never half-published")
    elif query.exception() is not None:
        raise query.exception()


def bundled(path: str) -> Path:
    """A path from a config: as given if it exists (or is absolute), else beside the packaged jobs
    (``sample_data = "sample_data/landing"`` finds the bundled sample files from any directory)."""
    given = Path(path)
    if given.is_absolute() or given.exists():
        return given
    return Path(__file__).resolve().parent / given
