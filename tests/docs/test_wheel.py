"""Installed as users install it: ``python -m build`` makes a wheel and an sdist, the wheel goes
into a fresh venv, and the README's quickstart runs from there - not from this source tree. The
packaged example jobs and their configs are in the wheel, so ``seo run`` finds them anywhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def readme_block(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (REPO / "README.md").read_text(), re.S)


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    pytest.importorskip("build", reason="python -m build comes with the [docs] extra (make test installs it)")
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend of this environment, no download; -x: wheel is not needed by setuptools >= 70.1
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "-x", "--outdir", str(out), str(REPO)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_wheel_and_sdist_hold_the_package_and_its_jobs(dist):
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert [w.name for w in wheels] == ["streaming_exactly_once-0.1.0-py3-none-any.whl"]  # the name the README installs
    assert len(sdists) == 1
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for path in (
        "streaming_exactly_once/py.typed",
        "streaming_exactly_once/examples/jobs/landing_to_parquet.py",
        "streaming_exactly_once/examples/jobs/_spark_session.py",
        "streaming_exactly_once/examples/conf/local.toml",
        "streaming_exactly_once/examples/jobs/sample_data/landing/events_000.csv",
    ):
        assert path in names, path
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/")) for n in names)
    with tarfile.open(sdists[0]) as sdist:
        names = sdist.getnames()  # the source: the repository's own jobs/ and conf/
        assert any(n.endswith("/conf/local.toml") for n in names) and any(n.endswith("/jobs/landing_to_parquet.py") for n in names)


@pytest.mark.spark
def test_readme_quickstart_runs_from_the_wheel_in_a_fresh_venv(dist, tmp_path):
    """The wheel is installed without its dependencies into a new venv; those come from this
    environment through a .pth file (no second 900 MB download of pyspark), after the venv's own
    site-packages, so the library itself is imported from the wheel."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    wheel = next(dist.glob("*.whl"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", f"{wheel}[spark,arrow]"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    site = Path(
        subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True).stdout.strip()
    )
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run(
        [python, "-c", "import streaming_exactly_once as m; print(m.__file__)"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr
    [quickstart] = readme_block("python")
    done = subprocess.run(
        [python, "-c", quickstart.replace("/tmp/seo-quickstart", str(tmp_path / "qs"))],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == ["3", "3"] and "2026-01-02" in done.stdout, done.stdout
    seo = env_dir / "bin" / "seo"
    version = subprocess.run([seo, "--version"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert version.returncode == 0 and "0.1.0" in version.stdout
    jobs = subprocess.run([seo, "run", "nope"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "landing_to_parquet" in jobs.stderr and str(site) in jobs.stderr, jobs.stderr


def test_readme_install_lines_name_what_the_build_makes():
    lines = "\n".join(readme_block("bash"))
    assert "pip install '.[spark,arrow]'" in lines
    assert "pip install 'dist/streaming_exactly_once-0.1.0-py3-none-any.whl[spark,arrow]'" in lines
