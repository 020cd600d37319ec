"""``seo run JOB``: load a job module, its TOML config, and run it.

Jobs are looked up in ``--jobs-dir`` when given, else in ``./jobs`` (a project's own) and then
among the library's example jobs: a clone's ``jobs/`` and ``conf/``, which the build copies into
the wheel (``streaming_exactly_once/examples``, see ``setup.py``) - so they are found from any
directory and from an installed wheel. ``--conf`` is a path, or the name of a packaged
config (``local``, ``delta``, ``datasets``, ``rate``, ``s3``); the default is ``local``.

A job module defines ``SPEC`` (its own config sections and keys) and
``run(config, *, on_event, stop, say) -> dict``. The runner owns what every job shares: reading
and validating the config (file < ``SEO_*`` environment < ``--set``), printing it with secrets
masked, printing one progress line per committed batch (or JSON lines with ``--json``),
appending those events to ``sink.metrics_path`` if set, and turning the first Ctrl-C into a
graceful stop (the in-flight batch finishes or rolls back; nothing is half-published).
"""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from ..config import TRIGGER_KEYS, load_job_config, redacted
from ..errors import ConfigError
from ..sink.keywords import conf_keys
from .printer import Printer, human_bytes

_PACKAGE = Path(__file__).resolve().parents[1]
#: The example jobs and their configs: inside an installed wheel, else beside the package in a clone.
EXAMPLES = next((root for root in (_PACKAGE / "examples", _PACKAGE.parent) if (root / "jobs" / "landing_to_parquet.py").is_file()), _PACKAGE.parent)
PACKAGED_JOBS = EXAMPLES / "jobs"
PACKAGED_CONF = EXAMPLES / "conf"
DEFAULT_CONF = "local"


def job_names(directory: Path) -> list[str]:
    """The jobs in ``directory``: its modules, without private helpers (``_spark_session``)."""
    return sorted(p.stem for p in directory.glob("*.py") if not p.stem.startswith("_")) if directory.is_dir() else []


def find_job(job: str, jobs_dir: str | None) -> Path:
    """The job module's file (see the module docstring), or ``ConfigError`` listing the jobs there are."""
    if job.endswith(".py"):
        path = Path(job)
        if path.is_file():
            return path
        raise ConfigError(f"No job file {job!r}.", key="job")
    places = [Path(jobs_dir)] if jobs_dir else [Path("jobs"), PACKAGED_JOBS]
    for place in places:
        path = place / f"{job}.py"
        if path.is_file():
            return path
    listed = "; ".join(f"{place}: {', '.join(job_names(place)) or 'none'}" for place in places)
    raise ConfigError(f"No job {job!r}. Available jobs in {listed}.", key="job")


def find_conf(conf: str | None) -> Path:
    """``--conf``: a file, or a packaged config by name (``local`` or ``conf/local.toml``)."""
    given = Path(conf or DEFAULT_CONF)
    if given.is_file():
        return given
    packaged = PACKAGED_CONF / f"{given.stem}.toml"
    if packaged.is_file():
        return packaged
    names = ", ".join(sorted(p.stem for p in PACKAGED_CONF.glob("*.toml")))
    raise ConfigError(f"config file {given} does not exist, and no packaged config is called {given.stem!r} (packaged: {names})", key="conf")


def load_job_module(job: str, jobs_dir: str | None) -> ModuleType:
    path = find_job(job, jobs_dir)
    if str(path.parent.resolve()) not in sys.path:
        sys.path.insert(0, str(path.parent.resolve()))  # jobs import their shared helpers by name
    spec = importlib.util.spec_from_file_location(f"seo_job_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path} cannot be loaded as a Python module", key="job")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "run"):
        raise ConfigError(f"{path} defines no run(config, ...) function", key="job")
    return module


def run_job(job: str, *, conf_path: str | None, overrides: list[str], jobs_dir: str | None, out: Printer) -> int:
    module = load_job_module(job, jobs_dir)
    spec = {"sink": conf_keys(), "trigger": TRIGGER_KEYS, **getattr(module, "SPEC", {})}
    conf = find_conf(conf_path)
    config = load_job_config(conf, spec=spec, overrides=overrides)
    metrics_path = config["sink"].pop("metrics_path", None)
    metrics = open(metrics_path, "a", encoding="utf-8") if metrics_path else None
    if not out.as_json:
        out.write(f"seo run {job} --conf {conf}")
        for section, values in redacted(config).items():
            if values:
                out.write(f"  [{section}] " + ", ".join(f"{k}={v}" for k, v in values.items()))
    stop = threading.Event()
    counts = {"batches": 0, "rows": 0}

    def on_event(event: dict[str, Any]) -> None:
        counts["batches"] += 1
        counts["rows"] += event.get("numRows") or 0
        if metrics is not None:
            metrics.write(json.dumps(event, default=str) + "\n")
            metrics.flush()
        if out.as_json:
            out.write(json.dumps(event, default=str))
        else:
            out.write(
                f"batch {event['batchId']:>5}  rows {event['numRows'] or 0:>8}  files {event['numFiles']:>4}  "
                f"{human_bytes(event['numBytes']):>10}  commit {event['commitMs']:7.1f} ms  (query batch {event['sparkBatchId']})"
            )

    def say(text: str) -> None:
        if not out.as_json:
            out.write(text)

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        say("stopping gracefully (Ctrl-C again to abort)...")

    previous = signal.signal(signal.SIGINT, on_sigint)
    t0 = time.time()
    try:
        summary = module.run(config, on_event=on_event, stop=stop, say=say) or {}
    finally:
        signal.signal(signal.SIGINT, previous)
        if metrics is not None:
            metrics.close()
    summary = {"job": job, "batches": counts["batches"], "rows": counts["rows"], "seconds": round(time.time() - t0, 1), **summary}
    if out.as_json:
        out.write(json.dumps({"event": "job_finished", **summary}, default=str))
    else:
        out.write("")
        out.block([(k, v) for k, v in summary.items()])
    return 0 if summary.get("verified", True) else 1
