"""The core imports no optional dependency: with any one optional package missing (blocked by a
meta-path hook in a fresh interpreter, ``blocked_import.py``), every module of the library that
does not itself need it imports, two Parquet batches commit, pyarrow and pandas read them, and
every ``seo`` command works on the table. A failure names the import chain that reached it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPTIONAL = ("pyiceberg", "deltalake", "polars", "duckdb", "s3fs", "adlfs", "gcsfs", "azure")


def run_blocked(package: str, root: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.install.blocked_import", package, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("package", OPTIONAL)
def test_the_core_works_without(package, tmp_path):
    result = run_blocked(package, tmp_path / "table")
    assert result["failures"] == [], f"without {package}:\n" + "\n".join(result["failures"])
    assert result["rows"] == {"arrow": list(range(20)), "pandas": list(range(20))}
