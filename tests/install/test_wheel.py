"""Installed as users install it: ``python -m build`` makes a wheel and an sdist, the README's
wheel line installs it with its real dependencies (from the wheelhouse, ``venvs``) into a fresh
venv, and the README's quickstart runs from there - not from this source tree. The packaged
example jobs and their configs are in the wheel, so ``seo run`` finds them anywhere."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile

import pytest

from tests.install import venvs

REPO = venvs.REPO


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    pytest.importorskip("build", reason="python -m build comes with the [docs] extra (make test installs it)")
    out = tmp_path_factory.mktemp("wheel") / "dist"
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


@pytest.mark.install
@pytest.mark.spark
def test_readme_quickstart_runs_from_the_wheel_in_a_fresh_venv(dist, tmp_path):
    """The README's wheel line, run as written next to ``dist/``: pip installs the wheel and
    every dependency ``[spark,arrow]`` declares, and nothing else is there."""
    line = venvs.readme_install_lines()[1]
    assert line == "pip install 'dist/streaming_exactly_once-0.1.0-py3-none-any.whl[spark,arrow]'", line
    venv = venvs.create(tmp_path / "venv", line, dist.parent, "the wheel [spark,arrow]")
    where = venvs.run(venv, ["python", "-c", "import streaming_exactly_once as m; print(m.__file__)"], cwd=tmp_path)
    assert where.stdout.strip().startswith(str(venv / "lib")), where.stdout + where.stderr
    venvs.run_quickstart(venv, tmp_path)
    version = venvs.run(venv, ["seo", "--version"], cwd=tmp_path)
    assert version.returncode == 0 and "0.1.0" in version.stdout
    jobs = venvs.run(venv, ["seo", "run", "nope"], cwd=tmp_path)
    assert "landing_to_parquet" in jobs.stderr and str(venv / "lib") in jobs.stderr, jobs.stderr


def test_readme_install_lines_name_what_the_build_makes():
    assert venvs.readme_install_lines() == [
        "pip install '.[spark,arrow]'",
        "pip install 'dist/streaming_exactly_once-0.1.0-py3-none-any.whl[spark,arrow]'",
    ]
