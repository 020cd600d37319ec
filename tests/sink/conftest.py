"""Helpers for sink tests: run a real streaming query and count every input id in the output."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.layout import STAGING_DIR, WAL_DIR, is_hidden
from streaming_exactly_once.testing.faults import ENV_VARS, FROM_ENV
from tests.datagen import CSV_SCHEMA

REPO = Path(__file__).resolve().parents[2]


def stream(spark, input_dir, files_per_trigger=2):
    return spark.readStream.schema(CSV_SCHEMA).option("maxFilesPerTrigger", files_per_trigger).csv(str(input_dir))


def run_query(spark, input_dir, table, checkpoint, *, files_per_trigger=2, **sink_options):
    """Run to the end of the input (availableNow); returns (sink, exception or None)."""
    sink = ExactlyOnceSink(str(table), **{"storage_wrapper": FROM_ENV, **sink_options})  # faults: SEO_FAIL_AT etc.
    query = sink.start(stream(spark, input_dir, files_per_trigger), checkpoint_location=str(checkpoint), trigger={"availableNow": True})
    try:
        query.awaitTermination()
        error = None
    except Exception as exc:  # StreamingQueryException wrapping the batch's error
        error = exc
    sink.close()
    return sink, error


def read_ids(spark, table, fmt="parquet"):
    reader = spark.read.format(fmt)
    if fmt in ("csv", "json"):
        reader = reader.schema("id LONG, v DOUBLE, p STRING")
        if fmt == "csv":
            reader = reader.option("header", "true")
    return Counter(r.id for r in reader.load(str(table)).select("id").collect())


def assert_exactly_once(spark, table, expected_ids, fmt="parquet"):
    counts = read_ids(spark, table, fmt)
    duplicates = {i: c for i, c in counts.items() if c > 1}
    missing = set(expected_ids) - set(counts)
    extra = set(counts) - set(expected_ids)
    assert not duplicates, f"{len(duplicates)} duplicated ids, e.g. {list(duplicates.items())[:5]}"
    assert not missing, f"{len(missing)} missing ids, e.g. {sorted(missing)[:5]}"
    assert not extra, f"unexpected ids {sorted(extra)[:5]}"


def assert_table_clean(table):
    """No pending WAL, no staging, and no data file outside the manifest (no orphans)."""
    storage = open_storage(str(table))
    assert storage.list_dir(WAL_DIR) == [], "WAL not empty"
    assert storage.list_dir(STAGING_DIR) == [], "staging not empty"
    listed = {e.uri for e in ManifestLog(storage).files()}
    on_disk = {storage.uri(f.path) for f in storage.walk_files() if not is_hidden(f.path)}
    assert on_disk == listed, f"orphans: {sorted(on_disk - listed)[:3]}, missing: {sorted(listed - on_disk)[:3]}"


def run_driver(tmp, *, env_extra=None, timeout=240, **args):
    cmd = [sys.executable, "-m", "tests.sink.driver"]
    for key, value in args.items():
        if value is True:
            cmd.append(f"--{key.replace('_', '-')}")  # a flag
        else:
            cmd += [f"--{key.replace('_', '-')}", str(value)]
    env = dict(os.environ)
    for key in ENV_VARS.values():
        env.pop(key, None)
    env.update(env_extra or {})
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(autouse=True)
def _no_fault_env(monkeypatch):
    for key in ENV_VARS.values():
        monkeypatch.delenv(key, raising=False)
