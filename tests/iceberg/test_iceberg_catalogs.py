"""Iceberg tables recorded by a pyiceberg SQL catalog (SQLite, and a real PostgreSQL started by the
fixtures), and writers racing in real processes - through a catalog and through the path-based
default. The concurrency a catalog (or the create-if-absent of a metadata file) arbitrates is
exercised: two processes commit the same batches at the same instant, and every batch must end
up in exactly one snapshot, every row once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from streaming_exactly_once.errors import IcebergTableError
from streaming_exactly_once.iceberg import IcebergCatalogRef
from streaming_exactly_once.storage import open_storage
from tests.iceberg.helpers import APP, SCHEMA, batch_files, context, ids_of, our_snapshots, run, step, target

REPO = Path(__file__).resolve().parents[2]


def rows(batches) -> Counter:
    return Counter(i for b in batches for i in ids_of(b))


def catalog_table(name: str, props: dict, identifier: str):
    from pyiceberg.catalog import load_catalog

    return load_catalog(name, **props).load_table(identifier)


def snapshots_by_batch(table) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for snap in table.metadata.snapshots:
        summary = snap.summary or {}
        if summary.get("seo.app-id") == APP:
            out.setdefault(int(summary["seo.batch-id"]), []).append(dict(summary.additional_properties))
    return out


def test_a_sql_catalog_records_one_snapshot_per_batch(tmp_path, sql_catalog):
    name, props = sql_catalog
    ref = IcebergCatalogRef(name, "db.events")
    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage, {name: props})
    for b in range(3):
        run(step(b, batch_files(storage, b), catalog=ref), ctx)
    table = catalog_table(name, props, "db.events")
    assert list(snapshots_by_batch(table)) == [0, 1, 2]
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == rows(range(3))
    assert table.metadata.location == str(tmp_path / "t")
    assert table.metadata_location.startswith(str(tmp_path / "t" / "metadata") + "/00002-")  # the catalog's own naming
    # replays (a lost checkpoint, a second writer) add nothing
    again = step(1, batch_files(storage, 1, tag="-replay"), catalog=ref)
    assert again.verify(context(storage, {name: props}))
    target(storage, catalog=ref, catalog_properties=props).commit(1, again.files, schema_json=SCHEMA, partition_by=["p"], metadata={})
    assert len(catalog_table(name, props, "db.events").metadata.snapshots) == 3
    # the path-based default refuses a table a catalog manages (its pointer decides what is current)
    with pytest.raises(IcebergTableError, match="managed by a catalog"):
        target(storage).applied_batch()


def test_a_stale_writer_through_a_catalog_adds_no_second_snapshot(tmp_path, sql_catalog):
    name, props = sql_catalog
    ref = IcebergCatalogRef(name, "db.events")
    storage = open_storage(str(tmp_path / "t"))
    run(step(0, batch_files(storage, 0), catalog=ref), context(storage, {name: props}))
    zombie = target(storage, catalog=ref, catalog_properties=props)
    assert zombie.applied_batch() == 0  # read before its successor committed batch 1
    successor = target(storage, catalog=ref, catalog_properties=props)
    successor.commit(1, batch_files(storage, 1, tag="s"), schema_json=SCHEMA, partition_by=["p"], metadata={})
    found = zombie.commit(1, batch_files(storage, 1, tag="z"), schema_json=SCHEMA, partition_by=["p"], metadata={}, fresh=True)
    table = catalog_table(name, props, "db.events")
    assert found == table.metadata.current_snapshot_id
    assert {b: len(s) for b, s in snapshots_by_batch(table).items()} == {0: 1, 1: 1}
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == rows(range(2))


def race(tmp_path: Path, root: Path, batches: list[int], *, catalog: dict | None, writers: int = 2, forced=(0, 1, 3)) -> list[dict]:
    """``writers`` processes commit the same ``batches`` starting at one instant; for ``forced``
    batches all of them commit on the same base (``racer``'s barrier), so all but one lose."""
    start_at = time.time() + 4.0  # after every child imported pyiceberg and staged its files
    barrier = {"dir": str(tmp_path / "barrier"), "writers": writers, "batches": list(forced)}
    os.makedirs(barrier["dir"])
    procs = []
    for w in range(writers):
        program = {"root": str(root), "tag": f"w{w}", "start_at": start_at, "batches": batches, "catalog": catalog, "barrier": barrier}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.iceberg.racer", json.dumps(program)],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def check_race(results: list[dict], snapshots: dict[int, list[str]], batches: list[int], forced=(0, 1, 3)) -> None:
    """Every batch in exactly one snapshot, committed by one writer and found done by the others;
    on each forced batch, every writer but one lost the race (the arbiter really arbitrated)."""
    assert {b: len(w) for b, w in snapshots.items()} == {b: 1 for b in batches}, results
    for b in forced:
        assert sum(r["lost"].count(b) for r in results) == len(results) - 1, results
    for r in results:
        assert "gave_up" not in r, results
        assert sorted(r["found"] + r["executed"]) == batches, results
    for b in batches:
        assert snapshots[b][0] in {r["tag"] for r in results}


@pytest.mark.slow
def test_processes_racing_through_a_sql_catalog_commit_each_batch_once(tmp_path, sql_catalog):
    name, props = sql_catalog
    batches = list(range(6))
    catalog = {"name": name, "identifier": "db.raced", "properties": props}
    results = race(tmp_path, tmp_path / "t", batches, catalog=catalog)
    table = catalog_table(name, props, "db.raced")
    by_batch = snapshots_by_batch(table)
    check_race(results, {b: [s["seo.queryId"] for s in snaps] for b, snaps in by_batch.items()}, batches)
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == rows(batches)


@pytest.mark.slow
def test_processes_racing_on_the_path_based_table_commit_each_batch_once(tmp_path):
    batches = list(range(6))
    results = race(tmp_path, tmp_path / "t", batches, catalog=None, writers=3)
    meta = json.loads((tmp_path / "t" / "metadata" / f"v{len(batches)}.metadata.json").read_text())
    assert not (tmp_path / "t" / "metadata" / f"v{len(batches) + 1}.metadata.json").exists()
    by_batch: dict[int, list[str]] = {}
    for snap in meta["snapshots"]:
        by_batch.setdefault(int(snap["summary"]["seo.batch-id"]), []).append(snap["summary"]["seo.queryId"])
    check_race(results, by_batch, batches)
    assert our_snapshots(tmp_path / "t") == {b: meta["snapshots"][b]["snapshot-id"] for b in batches}
    from tests.iceberg.helpers import iceberg_ids

    assert iceberg_ids(str(tmp_path / "t")) == rows(batches)
    # the losers' manifests were deleted: every Avro file left is one a snapshot names
    avro = {n for n in os.listdir(tmp_path / "t" / "metadata") if n.endswith(".avro")}
    named = {Path(s["manifest-list"]).name for s in meta["snapshots"]}
    assert named <= avro and len(avro) == 2 * len(batches), (sorted(avro), results)


@pytest.mark.parametrize("where", ["before-metadata", "before-hint"])
def test_a_writer_killed_inside_the_step_is_rolled_forward_once(tmp_path, where):
    root = tmp_path / "t"
    program = {"root": str(root), "tag": "k", "start_at": 0, "batches": [0, 1, 2], "catalog": None, "crash_at": where}
    killed = subprocess.run(
        [sys.executable, "-m", "tests.iceberg.racer", json.dumps(program)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    storage = open_storage(str(root))
    meta = root / "metadata"
    if where == "before-metadata":
        assert not (meta / "v3.metadata.json").exists()  # batch 2's manifests are on disk, no metadata names them
    else:
        assert (meta / "v3.metadata.json").exists() and (meta / "version-hint.text").read_text() == "2"
    # the successor rolls the WAL's step forward (its own files for the batch, as a recovery has them)
    s = step(2, batch_files(storage, 2, tag="-successor"))
    assert not s.verify(context(storage))  # before-hint: the batch is in, but hint readers do not see it yet
    run(s, context(storage))
    assert our_snapshots(root).keys() == {0, 1, 2}
    from tests.iceberg.helpers import iceberg_ids

    assert iceberg_ids(str(root)) == rows(range(3))
    assert (meta / "version-hint.text").read_text() == "3"  # path-based readers see the batch (the roll-forward points the hint)
    run(step(3, batch_files(storage, 3)), context(storage))
    assert (meta / "version-hint.text").read_text() == "4" and iceberg_ids(str(root)) == rows(range(4))
