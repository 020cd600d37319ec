"""The core imports no optional dependency, and a missing extra is a clear refusal.

For each package an extra brings (``extras.FEATURES``; pyarrow and pandas are the core's own),
a fresh interpreter blocks its import with a meta-path hook (``blocked_import.py``): every
module of the library that does not itself need it imports, two Parquet batches commit,
pyarrow and pandas read them and every ``seo`` command works on the table; and every way a
user reaches the feature - a sink of that format or on that storage, a reader, ``seo`` on a
Delta or Iceberg table - is a ``ConfigError`` naming the ``pip install`` line (``seo``: exit 4),
with nothing written. A failure names the import chain that reached the package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streaming_exactly_once import extras
from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
from streaming_exactly_once.delta.target import DeltaSettings
from streaming_exactly_once.iceberg.settings import IcebergSettings
from streaming_exactly_once.storage import open_storage
from tests.delta.helpers import commit_batch

REPO = Path(__file__).resolve().parents[2]
CORE = ("pyarrow", "pandas")
OPTIONAL = sorted({m.split(".")[0] for f in extras.FEATURES.values() for m in f.modules} - set(CORE))


@pytest.fixture(scope="module")
def format_tables(tmp_path_factory) -> Path:
    """A Delta and an Iceberg table of two batches each, written with every package installed."""
    work = tmp_path_factory.mktemp("formats")
    for name, settings in (("delta", {"delta": DeltaSettings()}), ("iceberg", {"iceberg": IcebergSettings()})):
        committer = TableCommitter(open_storage(str(work / name)), CommitterOptions(heartbeat=False, partition_by=("p",), **settings))
        for batch in range(2):
            commit_batch(committer, "f0000000-0000-0000-0000-000000000000", batch, list(range(batch * 10, batch * 10 + 10)))
        committer.close()
    return work


def run_blocked(package: str, work: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests.install.blocked_import", package, str(work)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_optional_package_is_blocked_here():
    assert {"deltalake", "pyiceberg", "polars", "duckdb", "s3fs", "adlfs", "gcsfs", "pyspark"} <= set(OPTIONAL)


@pytest.mark.parametrize("package", OPTIONAL)
def test_the_core_works_and_the_features_refuse_without(package, format_tables, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(format_tables, work)
    result = run_blocked(package, work)
    assert result["failures"] == [], f"without {package}:\n" + "\n".join(result["failures"])
    assert result["rows"] == {"arrow": list(range(20)), "pandas": list(range(20))}
    features = [k for k, f in extras.FEATURES.items() if any(m.split(".")[0] == package for m in f.modules)]
    assert features and result["refused"], f"nothing needing {package} was tried"
