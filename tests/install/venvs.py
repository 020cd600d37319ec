"""Clean virtualenvs built the way users build them, made cheap enough for every ``make test``.

* ``wheelhouse()`` - every wheel the matrix installs, fetched once (through pip's own cache,
  ``-c constraints.txt``) into ``.work/wheelhouse``; built again only when setup.cfg,
  constraints.txt or pyproject.toml change. One process builds it, the others wait (a lock).
* ``pip_env()`` - the environment of every install: ``PIP_NO_INDEX`` and ``PIP_FIND_LINKS``
  point pip at the wheelhouse, so the command line stays exactly the README's, and no pip
  configuration of this machine (mirrors, find-links) gets in.
* ``create(path, line, cwd)`` - a new venv (python -m venv) and one install line run in it as a
  user types it; ``extend(base, path, line, cwd)`` - a copy of a finished venv (hardlinks: no
  second 900 MB of pyspark) with one more install line run in it, what a user who adds an extra
  to an existing install gets.
* Each install is measured (seconds, MB) and recorded in ``.work/install-matrix.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / ".work"
WHEELHOUSE = WORK / "wheelhouse"
REPORT = WORK / "install-matrix.json"
#: what the matrix installs: every extra it tries, and what building the project needs
WHEELHOUSE_REQUIREMENTS = (".[spark,arrow,delta,iceberg,s3,polars,duckdb]", "setuptools>=68", "wheel")
PYTHON = shutil.which("python3.11") or sys.executable


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """One process at a time (pytest-xdist's workers share ``.work``)."""
    WORK.mkdir(exist_ok=True)
    with open(WORK / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _inputs_hash() -> str:
    digest = hashlib.sha256()
    for name in ("setup.cfg", "constraints.txt", "pyproject.toml", *WHEELHOUSE_REQUIREMENTS):
        digest.update(name.encode() + ((REPO / name).read_bytes() if (REPO / name).is_file() else b""))
    return digest.hexdigest()


def wheelhouse() -> Path:
    """``.work/wheelhouse``, complete for the current setup.cfg and constraints.txt."""
    stamp = WHEELHOUSE / ".complete"
    with locked("wheelhouse"):
        if stamp.is_file() and stamp.read_text() == _inputs_hash():
            return WHEELHOUSE
        shutil.rmtree(WHEELHOUSE, ignore_errors=True)
        WHEELHOUSE.mkdir(parents=True)
        started = time.monotonic()
        source = copy_source(WORK / "wheelhouse-source")  # pip builds in the tree: not in this checkout
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "-c", str(REPO / "constraints.txt"), "-w", str(WHEELHOUSE), *WHEELHOUSE_REQUIREMENTS],
            cwd=source,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        for own in WHEELHOUSE.glob("streaming_exactly_once-*.whl"):
            own.unlink()  # the project is installed from its source or its built wheel, never from here
        shutil.rmtree(source)
        record("wheelhouse", seconds=time.monotonic() - started, megabytes=megabytes(WHEELHOUSE), line="pip wheel -c constraints.txt ...")
        stamp.write_text(_inputs_hash())
    return WHEELHOUSE


def copy_source(dest: Path) -> Path:
    """The project's files as a fresh clone has them (no venv, no build output, no .work)."""
    shutil.rmtree(dest, ignore_errors=True)
    ignore = shutil.ignore_patterns(".venv", ".work", ".git", "__pycache__", "*.egg-info", "build", "dist", "results", ".pytest_cache")
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def pip_env(**extra: str) -> dict[str, str]:
    """The environment of an install, and of the programs then run in the venv: nothing of this
    test process's environment that would make the venv see more than it has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "SEO_", "PYSPARK_", "VIRTUAL_ENV")) and k != "PYTHONPATH"}
    env.update(
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheelhouse()),
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_COMPILE="1",  # Python compiles on first import; pip would compile all of pyspark first
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_QUIET="1",
    )
    env.update(extra)
    return env


def megabytes(path: Path) -> float:
    """Disk space under ``path`` (each hardlinked file counted once)."""
    done = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0]) / 1024


def record(name: str, **facts: object) -> None:
    with locked("install-matrix-report"):
        report = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
        report[name] = {k: round(v, 1) if isinstance(v, float) else v for k, v in facts.items()}
        REPORT.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


def install(venv: Path, line: str, cwd: Path, name: str, *, base_mb: float = 0.0) -> None:
    """Run ``line`` (``pip install ...`` as the README writes it) with the venv's pip."""
    args = shlex.split(line)
    assert args[:2] == ["pip", "install"], line
    started = time.monotonic()
    done = subprocess.run([str(venv / "bin" / "python"), "-m", *args], cwd=cwd, env=pip_env(), capture_output=True, text=True, timeout=1200)
    seconds = time.monotonic() - started
    assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    total = megabytes(venv)
    record(name, line=line, seconds=seconds, megabytes=total, added_megabytes=total - base_mb)


def create(venv: Path, line: str, cwd: Path, name: str) -> Path:
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True, timeout=300)
    install(venv, line, cwd, name)
    return venv


def extend(base: Path, venv: Path, line: str, cwd: Path, name: str) -> Path:
    """A copy of ``base`` whose files are hardlinks to its own, then ``line`` installed in it.
    pip replaces a file by writing a new one, so the base never changes; the scripts' ``#!``
    lines are made to name the copy's python."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run(["cp", "-al", str(base), str(venv)], check=True, timeout=600)
    old, new = f"#!{base}/bin/python", f"#!{venv}/bin/python"
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            head = script.read_bytes()[:200]
            if head.startswith(old.encode()):
                text = script.read_text()
                script.unlink()  # a new file: the base's stays as it is
                script.write_text(re.sub("^" + re.escape(old), new, text))
                script.chmod(0o755)
    cfg = venv / "pyvenv.cfg"
    text = cfg.read_text()
    cfg.unlink()
    cfg.write_text(text.replace(str(base), str(venv)))
    install(venv, line, cwd, name, base_mb=megabytes(base))
    return venv


#: Spark's JVM for the matrix's short local jobs: the C1 compiler only and the serial collector
#: halve its CPU (about 40 s to 20 s for the quickstart); what the jobs do is the same.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def run(venv: Path, args: list[str], cwd: Path, *, timeout: int = 900, **env: str) -> subprocess.CompletedProcess[str]:
    """A program of the venv (``seo``, ``python``) as a user runs it there: the venv's python for
    Spark's workers too, nothing of this checkout on the path."""
    program = str(venv / "bin" / args[0])
    environment = pip_env(PYSPARK_PYTHON=str(venv / "bin" / "python"), PYSPARK_DRIVER_PYTHON=str(venv / "bin" / "python"), **env)
    environment.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    environment.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)
    return subprocess.run([program, *args[1:]], cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)


#: where the README's quickstart writes; the only thing changed when it runs here
QUICKSTART_DIR = "/tmp/seo-quickstart"


def run_quickstart(venv: Path, work: Path) -> Path:
    """The README's quickstart, as written but for its directory (``work/qs``), run with the
    venv's python; the table it wrote."""
    [quickstart] = readme_blocks("python")
    assert QUICKSTART_DIR in quickstart
    script = work / "quickstart.py"
    script.write_text(quickstart.replace(QUICKSTART_DIR, str(work / "qs")))
    done = run(venv, ["python", str(script)], cwd=work)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert done.stdout.splitlines()[:2] == ["3", "3"] and "2026-01-02" in done.stdout, done.stdout
    return work / "qs" / "events"


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def readme_install_lines() -> list[str]:
    """The README's lines that install the project, in order (from the source, then the wheel)."""
    lines = []
    for block in readme_blocks("bash"):
        for part in re.split(r"\n|&&", block):
            part = part.strip()
            if part.startswith(("pip install '.", "pip install 'dist/")):
                lines.append(part)
    return lines
