"""``seo compact`` on Iceberg tables (path-based, in a SQL catalog, and with Delta too): the run
adds one ``replace`` snapshot (its empty batches none, its compaction batch no empty append);
pyiceberg reads every row once at every snapshot; a kill -9 anywhere in
the run loses nothing; a frozen run's rewrite never publishes after a takeover."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from streaming_exactly_once import read as readers
from streaming_exactly_once.maintenance.compact import MAINTENANCE_QUERY
from streaming_exactly_once.storage import open_storage
from tests.commit.power_cut_runs import seo
from tests.delta.helpers import commit_batch
from tests.delta.readback import delta_ids
from tests.iceberg.table_helpers import current_metadata, iceberg_committer, pyiceberg_ids
from tests.maintenance.test_compact import _FROZEN_RUN, _KILLED_RUN, POLICY_ARGS, _stopped, ids_upto, live_names, read_ids
from tests.torture.matrix_checks import changes, snapshot

Q = "1cec0c0c-0000-0000-0000-000000000000"


def iceberg_table(root, batches: int = 7, *, delta: bool = False, **opts) -> None:
    committer = iceberg_committer(open_storage(str(root)), delta=delta, compact_interval=5, **opts)
    for b in range(batches):
        commit_batch(committer, Q, b, list(range(b * 10, b * 10 + 10)))
    committer.close()


def operations(root) -> list[tuple[str, int]]:
    return [(s["summary"]["operation"], int(s["summary"]["seo.batch-id"])) for s in current_metadata(root)["snapshots"]]


def after_compact(batch: int, empty: int = 3) -> Counter:
    """The rows of table batch ``batch`` when ``seo compact`` committed ``empty`` batches from 7
    on (no rows; 7-9 for a whole run) and the stream's Spark batch 7 onwards went on after them."""
    return ids_upto(min(batch, 6)) if batch <= 6 + empty else ids_upto(batch - empty)


def check_every_snapshot(root, rows_of=after_compact) -> None:
    """Every snapshot of the current metadata reads the rows of its batch (``rows_of``), each once."""
    for snap in current_metadata(root)["snapshots"]:
        batch = int(snap["summary"]["seo.batch-id"])
        assert pyiceberg_ids(root, snapshot_id=snap["snapshot-id"]) == rows_of(batch), snap["summary"]


@pytest.mark.parametrize("delta", [False, True], ids=["iceberg", "delta+iceberg"])
def test_compact_publishes_a_replace_snapshot_at_the_next_compaction_batch(tmp_path, delta):
    root = tmp_path / "t"
    iceberg_table(root, delta=delta)
    code, out = seo("--json", "compact", "--dry-run", *POLICY_ARGS, str(root))
    assert code == 0, out
    plan = json.loads(out)
    assert plan["batches"] == [7, 8, 9] and plan["filesAfter"] == 1 and len(plan["rewrites"][0]["files"]) == 14, plan
    assert operations(root) == [("append", b) for b in range(7)]  # a dry run writes nothing

    code, out = seo("--json", "compact", *POLICY_ARGS, str(root))
    assert code == 0, out
    assert json.loads(out)["batches"] == [7, 8, 9]
    # one snapshot for the run: the compaction batch's replace (the empty batches have none, and no empty append)
    assert operations(root) == [("append", b) for b in range(7)] + [("replace", 9)]
    replace = current_metadata(root)["snapshots"][-1]["summary"]
    assert replace["deleted-data-files"] == "14" and replace["added-data-files"] == "1", replace
    assert pyiceberg_ids(root) == ids_upto(6)
    check_every_snapshot(root)
    assert len(live_names(root)) == 1 and read_ids(root) == ids_upto(6)
    for older in range(10):
        assert read_ids(root, as_of=older) == ids_upto(min(older, 6)), f"as of {older}"
    ids = [s["snapshot-id"] for s in current_metadata(root)["snapshots"]]
    # as of the empty batches 7-8, the table is batch 6's snapshot
    assert [readers.iceberg_snapshot(str(root), as_of=b) for b in range(10)] == ids[:7] + [ids[6], ids[6], ids[7]]
    if delta:  # one Delta commit for the run too: an OPTIMIZE
        for version in range(8):
            assert delta_ids(root, version=version) == ids_upto(min(version, 6)), f"Delta version {version}"
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out

    # the stream carries on: its next Spark batch is the table's batch 10
    committer = iceberg_committer(open_storage(str(root)), delta=delta, compact_interval=5)
    commit_batch(committer, Q, 7, list(range(70, 80)))
    assert committer.last_spark_batch(Q) == 7 and committer.last_spark_batch(MAINTENANCE_QUERY) == 2
    committer.close()
    assert pyiceberg_ids(root) == ids_upto(7) and read_ids(root) == ids_upto(7)
    code, out = seo("gc", "--older-than", "0s", str(root))
    assert code == 0, out
    check_every_snapshot(root)


def test_compact_of_a_table_in_a_sql_catalog_opens_it_by_pyiceberg_configuration(tmp_path, sql_catalog, monkeypatch):
    """The sink's catalog properties are never stored: ``seo compact`` finds the catalog as
    pyiceberg does (``PYICEBERG_CATALOG__<NAME>__*``), and the catalog records the replace."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.utils.config import Config

    from streaming_exactly_once.iceberg.settings import IcebergCatalogRef

    name, props = sql_catalog
    root = tmp_path / "t"
    iceberg_table(root, iceberg_catalog=IcebergCatalogRef(name, "db.events"), iceberg_catalog_properties=tuple(sorted(props.items())))
    before = snapshot(open_storage(str(root)))
    code, out = seo("compact", *POLICY_ARGS, str(root))
    assert code == 4 and f"PYICEBERG_CATALOG__{name.upper()}__URI" in out, out  # not configured for pyiceberg: refused, nothing written
    assert snapshot(open_storage(str(root))) == before
    env = {f"PYICEBERG_CATALOG__{name.upper()}__{key.upper()}": value for key, value in props.items()}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("pyiceberg.catalog._ENV_CONFIG", Config())  # pyiceberg reads it at import, as a new `seo` would
    code, out = seo("--json", "compact", *POLICY_ARGS, str(root))
    assert code == 0, out
    table = load_catalog(name, **props).load_table("db.events")
    assert [s.summary.operation.value for s in table.metadata.snapshots][-2:] == ["append", "replace"]
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == ids_upto(6)
    assert len(table.inspect.files()) == 1
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out

    # configured, but to a catalog that does not hold the table (a typo, a relative SQLite path
    # run elsewhere): gc must not take the table's metadata files for garbage, nor recover say all is well
    monkeypatch.setenv(f"PYICEBERG_CATALOG__{name.upper()}__URI", f"sqlite:///{tmp_path}/elsewhere.db")
    monkeypatch.setattr("pyiceberg.catalog._ENV_CONFIG", Config())
    before = snapshot(open_storage(str(root)))
    for command in (["gc", "--older-than", "0s"], ["recover"]):
        code, out = seo(*command, str(root))
        assert code == 1 and f"Catalog {name!r} has no table db.events" in out and "Nothing was changed" in out, out
    code, out = seo("--json", "verify", str(root))
    assert code == 1 and not any("metadata.json" in p["path"] for p in json.loads(out)["problems"] if p["kind"] == "orphan"), out
    assert snapshot(open_storage(str(root))) == before


def test_a_foreign_change_of_the_partition_spec_is_refused_before_compact_writes_anything(tmp_path):
    """Another writer changed the Iceberg table's partition spec after the stream stopped: the
    stream's next batch is refused, and so is ``seo compact``'s first batch, before its claim -
    not after the manifest, where the Iceberg commit could never land."""
    from pyiceberg.table import StaticTable

    from streaming_exactly_once.iceberg.catalogs import open_catalog
    from streaming_exactly_once.iceberg.settings import IcebergCatalogRef

    root = tmp_path / "t"
    iceberg_table(root)
    table = open_catalog(open_storage(str(root)), IcebergCatalogRef(), {}).load_table()
    with table.update_spec() as spec:
        spec.add_identity("id")
    assert len(StaticTable.from_metadata(str(root)).metadata.spec().fields) == 2
    before = snapshot(open_storage(str(root)))
    code, out = seo("compact", *POLICY_ARGS, str(root))
    assert code == 1 and "the table is partitioned by ['identity(p)', 'identity(id)'], the sink by ['identity(p)']" in out, out
    assert "Another writer changed the table's partition spec" in out and "cast the stream" not in out, out
    assert changes_outside_staging(before, snapshot(open_storage(str(root)))) == []
    code, out = seo("--json", "verify", str(root))
    assert not [p for p in json.loads(out)["problems"] if p["severity"] == "error"], out
    assert pyiceberg_ids(root) == ids_upto(6) and read_ids(root) == ids_upto(6)


def changes_outside_staging(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return [c for c in changes(before, after) if "/_seo/staging/" not in f"/{c.split(' ', 1)[1]}"]


BOUNDARIES = ["after-rewrite", "after-wal", "after-manifest", "before-iceberg-publish", "mid-iceberg", "after-iceberg", "after-commit"]


@pytest.mark.parametrize("boundary", [pytest.param(b, marks=pytest.mark.long) if b in BOUNDARIES[4:] else b for b in BOUNDARIES])
def test_a_kill_inside_compact_of_an_iceberg_table_loses_nothing(tmp_path, boundary):
    """kill -9 in the run: pyiceberg reads every row once at every snapshot, before the restart
    and after the next run finishes the compaction; recover, gc and verify are clean."""
    root = tmp_path / "t"
    iceberg_table(root)
    run = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(root), boundary], capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert pyiceberg_ids(root) == ids_upto(6) and read_ids(root) == ids_upto(6)
    check_every_snapshot(root)
    for args in (["recover"], ["compact", *POLICY_ARGS], ["gc", "--older-than", "0s"]):
        code, out = seo(*args, str(root))
        assert code == 0, out
    assert pyiceberg_ids(root) == ids_upto(6) and read_ids(root) == ids_upto(6)
    check_every_snapshot(root)
    assert len(live_names(root)) == 1, live_names(root)
    assert [op for op, _ in operations(root)].count("replace") == 1, operations(root)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


#: where the run freezes, and how many of its batches are published by then (the takeover rolls a claimed one forward)
FROZEN = {"after-rewrite": 0, "before-iceberg-publish": 3, "mid-iceberg": 3}


@pytest.mark.parametrize("spec", sorted(FROZEN))
def test_a_frozen_compact_of_an_iceberg_table_never_publishes_after_a_takeover(tmp_path, spec):
    """The run freezes (SIGSTOP) in its rewrite or right before its compaction batch's Iceberg
    commit; the stream takes the table over and commits through its own compaction batch; the
    run wakes. A rewrite the takeover aborted never publishes; a claimed one is published once.
    Every snapshot reads every row once. Frozen inside its Iceberg commit (``mid-iceberg``: its
    metadata file created, the version hint not yet written), the woken run must not move the
    hint back under its successor: pyiceberg reads the table by that hint."""
    root = tmp_path / "t"
    iceberg_table(root)
    frozen = subprocess.Popen([sys.executable, "-c", _FROZEN_RUN, str(root), spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not _stopped(frozen.pid):
        assert frozen.poll() is None and time.time() < deadline, frozen.communicate()
        time.sleep(0.05)
    try:
        taker = iceberg_committer(open_storage(str(root)), compact_interval=5)
        taker.lease.clock = lambda: time.time() + 3600  # the frozen run's lease has run out
        for b in range(7, 12):
            commit_batch(taker, Q, b, list(range(b * 10, b * 10 + 10)))
        taker.close()
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    _, err = frozen.communicate(timeout=60)
    if spec == "after-rewrite":  # the takeover aborted its staged rewrite
        assert frozen.returncode == 7, err[-2000:]
    else:  # its claim was made before the takeover, which rolled it forward: the run finds it done, or is fenced
        assert frozen.returncode in (0, 7), err[-2000:]
    assert pyiceberg_ids(root) == ids_upto(11) and read_ids(root) == ids_upto(11)
    check_every_snapshot(root, lambda b: after_compact(b, FROZEN[spec]))
    code, out = seo("recover", str(root))
    assert code == 0, out
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out
    assert pyiceberg_ids(root) == ids_upto(11)
