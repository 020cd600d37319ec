"""``format="iceberg"`` through the commit layer, without Spark: real Parquet files, the Iceberg
metadata written through our storage, restarts after failures at each boundary of the Iceberg
step, the table's identity, upkeep (status, verify, gc, snapshot expiry) and schema evolution.
What Iceberg readers see is read with pyiceberg alone, by path."""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.maintenance.gc import collect_garbage
from streaming_exactly_once.maintenance.status import table_status
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer
from tests.delta.helpers import SCHEMA, commit_batch
from tests.iceberg.table_helpers import Q, current_metadata, iceberg_committer, ids_of, pyiceberg_ids, snapshots_by_batch
from tests.readers.tables import retired
from tests.torture.matrix_checks import changes, snapshot


def test_an_iceberg_batch_sets_the_tables_high_water_property_and_names_its_snapshot(tmp_path):
    """What only Iceberg has (the contract of every format is tests/formats/test_contract.py)."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = iceberg_committer(storage)
    for b in range(5):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    snapshots = snapshots_by_batch(table)
    meta = current_metadata(table)
    assert meta["properties"][f"seo.batch-id.streaming-exactly-once:{_table_id(table)}"] == "4"
    assert [read.iceberg_snapshot(str(table), as_of=b) for b in range(5)] == [snapshots[b] for b in range(5)]
    identity = (table / "_seo" / "table").read_text().splitlines()
    assert identity[0] == "v3" and '"iceberg":{"appId":"streaming-exactly-once:' in identity[1]
    assert table_status(storage)["iceberg"]["snapshotId"] == snapshots[4]


def _table_id(table) -> str:
    return json.loads((table / "_seo" / "table").read_text().splitlines()[1])["tableId"]


@pytest.mark.parametrize("boundary", ["after-manifest", "before-iceberg", "before-iceberg-publish", "mid-iceberg"])
def test_verify_names_an_iceberg_commit_a_failure_left_pending(tmp_path, boundary):
    """The restart after each boundary is the contract's; what verify says in between is Iceberg's."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    first = iceberg_committer(storage, fail_at=f"{boundary}@2")
    commit_batch(first, Q, 0, ids_of(0))
    with pytest.raises(Exception, match="injected failure"):
        commit_batch(first, Q, 1, ids_of(1))
    first.close()
    kinds = {p.kind: p.severity for p in verify_table(storage).problems}
    if boundary == "mid-iceberg":  # the metadata file is there, the hint not yet
        assert "iceberg-stale-hint" in kinds
    else:
        assert kinds.get("iceberg-pending") == "warning" and "iceberg-behind" not in kinds


def test_verify_says_path_readers_fail_where_the_hint_names_a_version_that_is_gone(tmp_path):
    """A hint naming a retired version (as a writer frozen inside its hint write could leave
    before its commit checked for that): path-based readers cannot open the table at all, so it
    is an error, not the stale hint's warning."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = iceberg_committer(storage)
    for b in range(3):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    (table / "metadata" / "v1.metadata.json").unlink()  # retired, as delete-after-commit does
    (table / "metadata" / "version-hint.text").write_text("1")
    kinds = {p.kind: p.severity for p in verify_table(storage).problems}
    assert kinds.get("iceberg-hint-missing") == "error" and "iceberg-stale-hint" not in kinds


def test_a_restart_with_another_format_is_refused_before_anything_is_touched(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    first = iceberg_committer(storage, fail_at="after-manifest@2")
    commit_batch(first, Q, 0, ids_of(0))
    with pytest.raises(Exception, match="injected failure"):
        commit_batch(first, Q, 1, ids_of(1))  # a claim left pending: recovery would roll it forward
    first.close()
    before = snapshot(storage)
    with pytest.raises(ConfigError, match="Iceberg table .* format='iceberg'"):
        make_committer(storage, partition_by=("p",)).open()
    with pytest.raises(ConfigError, match="written without a Delta log"):
        iceberg_committer(storage, delta=True).open()
    from streaming_exactly_once.iceberg.settings import IcebergCatalogRef

    with pytest.raises(ConfigError, match="catalog 'prod' as 'db.t'"):
        iceberg_committer(storage, iceberg_catalog=IcebergCatalogRef("prod", "db.t")).open()
    assert not changes(before, snapshot(storage))  # nothing rolled forward, nothing deleted (the lease's files aside)
    plain = open_storage(str(tmp_path / "plain"))
    parquet_writer = make_committer(plain, partition_by=("p",))
    commit_batch(parquet_writer, Q, 0, ids_of(0), schema=None)
    parquet_writer.close()
    with pytest.raises(ConfigError, match="written without an Iceberg table"):
        iceberg_committer(plain).open()
    # the right configuration rolls the pending batch forward
    again = iceberg_committer(storage)
    assert again.open().rolled_forward == [1]
    again.close()
    assert pyiceberg_ids(table) == Counter(ids_of(0) + ids_of(1))


def test_snapshot_expiry_keeps_the_newest_and_a_replay_after_it_adds_nothing(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = iceberg_committer(storage, keep=3)
    for b in range(6):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    assert sorted(snapshots_by_batch(table)) == [3, 4, 5]  # expired in the batches' own commits
    versions = sorted(int(n[1:].split(".")[0]) for n in os.listdir(table / "metadata") if n.endswith(".metadata.json"))
    assert versions == list(range(1, 7))  # one metadata version per batch, no commit of its own for expiry
    # the Iceberg table no longer has the snapshots of batches 0..2, but still knows them by its
    # high-water mark; Spark replaying batches 0..5 adds nothing, the next batch follows
    from streaming_exactly_once.iceberg.target import IcebergTarget
    from streaming_exactly_once.table.identity import read_identity

    identity = read_identity(storage)
    target = IcebergTarget(storage, identity.iceberg.app_id)
    assert target.applied_batch() == 5 and target.snapshot_committing(1) is None
    again = iceberg_committer(storage, keep=3)
    for b in range(6):
        assert commit_batch(again, Q, b, ids_of(b)) is None  # Spark replayed it: skipped
    commit_batch(again, Q, 6, ids_of(6))
    again.close()
    assert pyiceberg_ids(table) == Counter(i for b in range(7) for i in ids_of(b))
    assert sorted(snapshots_by_batch(table)) == [4, 5, 6]
    # what the expired snapshots alone named (manifest lists, merged-away manifests) went with them
    meta = current_metadata(table)
    needed = {s["manifest-list"].rsplit("/", 1)[-1] for s in meta["snapshots"]}
    assert {n for n in os.listdir(table / "metadata") if n.startswith("snap-")} == needed
    assert verify_table(storage).problems == []


def _iceberg_needed(table) -> list[str]:
    """Every file the current metadata version reaches (pyiceberg reads it): metadata files in its
    log, manifest lists and manifests of its snapshots, their data files."""
    from pyiceberg.table import StaticTable

    static = StaticTable.from_metadata(str(table))
    meta = static.metadata
    out = [static.metadata_location, *(e.metadata_file for e in meta.metadata_log)]
    for snap in meta.snapshots:
        out.append(snap.manifest_list)
        for manifest in snap.manifests(static.io):
            out.append(manifest.manifest_path)
            out += [e.data_file.file_path for e in manifest.fetch_manifest_entry(static.io, discard_deleted=True)]
    return [os.path.relpath(p.removeprefix("file://"), table) for p in out]


def test_gc_keeps_every_file_a_retained_snapshot_needs_and_deletes_what_none_names(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = iceberg_committer(storage, keep=2, min_batches_to_retain=2)
    for b in range(5):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    # a writer killed inside its Iceberg commit leaves manifests no metadata version names, and a
    # stray data file nobody names: garbage; everything a retained snapshot or version needs stays
    leftovers = ["metadata/0000dead-beef-0000-0000-000000000000-m0.avro", "metadata/snap-1-0-0000dead-beef.avro"]
    for path in leftovers:
        storage.put_if_absent(path, b"Obj\x01")
    retired(table, "p=a/orphan.parquet", b"x")
    storage.put_if_absent("p=a/stray.parquet", b"y")  # no record: another tool's, kept
    needed = set(_iceberg_needed(table))
    now = int(time.time() * 1000) + 10_000
    report = collect_garbage(storage, older_than_ms=0, now_ms=now)
    deleted = {os.path.relpath(u.removeprefix("file://"), table) for u, _ in report.orphans}
    assert deleted == {"p=a/orphan.parquet", *leftovers}
    assert [u.rsplit("/", 1)[-1] for u, _ in report.foreign] == ["stray.parquet"] and (table / "p=a" / "stray.parquet").exists()
    assert all((table / p).exists() for p in needed)
    # every reader still reads every row; the data files of expired snapshots stay (the manifest names them)
    expected = Counter(i for b in range(5) for i in ids_of(b))
    assert pyiceberg_ids(table) == expected == Counter(read.arrow(str(table)).column("id").to_pylist())
    assert [(p.kind, p.path.rsplit("/", 1)[-1]) for p in verify_table(storage).problems] == [("foreign-file", "stray.parquet")]


def test_an_added_column_is_optional_and_in_the_name_mapping(tmp_path):
    """That the column comes with its batch's commit is the contract's; how Iceberg holds it is here."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = iceberg_committer(storage, schema_evolution="add_columns")
    commit_batch(committer, Q, 0, ids_of(0))
    wider = json.loads(SCHEMA)
    wider["fields"].append({"name": "extra", "type": "string", "nullable": True, "metadata": {}})
    commit_batch(committer, Q, 1, ids_of(1), schema=json.dumps(wider))
    committer.close()
    meta = current_metadata(table)
    schema = next(s for s in meta["schemas"] if s["schema-id"] == meta["current-schema-id"])
    assert not schema["fields"][2]["required"]
    mapping = json.loads(meta["properties"]["schema.name-mapping.default"])
    assert {n for m in mapping for n in m["names"]} == {"id", "p", "extra"}


def test_both_table_formats_get_every_batch_and_a_crash_between_them_rolls_both_forward(tmp_path):
    from tests.delta.readback import batch_commits, delta_ids

    table = tmp_path / "t"
    storage = open_storage(str(table))
    first = iceberg_committer(storage, delta=True, fail_at="before-iceberg@2")
    commit_batch(first, Q, 0, ids_of(0))
    with pytest.raises(Exception, match="injected failure"):
        commit_batch(first, Q, 1, ids_of(1))
    first.close()
    # the Delta log has batch 1, the Iceberg table not yet: the claim is pending, which verify
    # calls a warning (the next start completes it), not an error
    assert sorted(batch_commits(table)) == [0, 1] and sorted(snapshots_by_batch(table)) == [0]
    kinds = {p.kind: p.severity for p in verify_table(storage).problems}
    assert kinds["iceberg-pending"] == "warning" and "error" not in kinds.values(), kinds
    second = iceberg_committer(storage, delta=True)
    assert second.open().rolled_forward == [1]
    commit_batch(second, Q, 2, ids_of(2))
    second.close()
    expected = Counter(i for b in range(3) for i in ids_of(b))
    assert pyiceberg_ids(table) == delta_ids(table) == Counter(read.arrow(str(table)).column("id").to_pylist()) == expected
    for b in range(3):  # at every batch, the three reader families see the same rows
        rows = Counter(read.arrow(str(table), as_of=b).column("id").to_pylist())
        assert pyiceberg_ids(table, snapshot_id=snapshots_by_batch(table)[b]) == delta_ids(table, version=b) == rows
    assert verify_table(storage).problems == []
    status = table_status(storage)
    assert status["delta"]["batchId"] == status["iceberg"]["batchId"] == 2


def _program(name: str, root, steps: list[dict], *, delta: bool = False) -> dict:
    return {
        "name": name,
        "root": str(root),
        "iceberg": {"snapshots_to_keep": 4},
        "delta": {"checkpoint_interval": 4} if delta else None,
        "options": {"lease_timeout_ms": 1500},
        "steps": steps,
    }


@pytest.mark.torture
@pytest.mark.parametrize(
    ("boundary", "delta"),
    [  # Iceberg alone: tests/formats/test_contract.py
        ("before-iceberg", True),
        ("before-iceberg-publish", True),
        ("mid-iceberg", True),
    ],
)
def test_sigkill_around_the_iceberg_step_rolls_forward_exactly_once(tmp_path, boundary, delta):
    """A writer SIGKILLs itself at the 3rd batch's boundary; the next writer recovers and goes on.
    Every row is counted once in every reader family: pyiceberg by path, our manifest readers
    and (with both formats) delta-rs."""
    import signal

    from tests.commit.processes import QA, Writer, batch_rows, stop_all

    table = tmp_path / "t"
    writers: list[Writer] = []
    try:
        a = Writer(
            _program(
                "A",
                table,
                [
                    {"do": "open"},
                    {"do": "commits", "query": QA, "count": 2, "rows": 6},
                    {"do": "commits", "query": QA, "count": 1, "rows": 6, "crash_at": boundary},
                    {"do": "hang"},
                ],
                delta=delta,
            )
        )
        writers.append(a)
        a.proc.wait(timeout=120)
        assert a.proc.returncode == -signal.SIGKILL, a.output()
        b = Writer(
            _program(
                "B",
                table,
                [
                    {"do": "open", "retry_s": 10},
                    {"do": "commits", "query": QA, "count": 3, "rows": 6, "first": 3},
                    {"do": "close"},
                ],
                delta=delta,
            )
        )
        writers.append(b)
        assert b.wait(timeout=120) == 0, b.output()
        assert all(c["status"] in ("committed", "duplicate") for c in b.commits()), b.output()
    finally:
        stop_all(writers)
    assert "rolled_forward=[2]" in b.events("open")[0]["recovery"], b.output()
    ids = [i for sb in range(6) for i in batch_rows(0, sb, 6)]
    assert len(set(ids)) == len(ids)  # the writers' row ids are unique: a count of 1 each is exactly once
    expected = Counter(ids)
    assert pyiceberg_ids(table) == expected
    assert Counter(read.arrow(str(table)).column("id").to_pylist()) == expected
    assert sorted(snapshots_by_batch(table)) == [2, 3, 4, 5]  # four kept (expiry in each commit)
    if delta:
        from tests.delta.readback import batch_commits, delta_ids

        assert delta_ids(table) == expected and sorted(batch_commits(table)) == list(range(6))
    report = verify_table(open_storage(str(table)))
    assert report.errors == []
    # what the killed commit wrote before its metadata file (its manifests) went at the takeover
    assert [p.path for p in report.problems if p.kind == "orphan"] == []


def test_a_table_in_a_sql_catalog_through_the_committer_and_upkeep(tmp_path, sql_catalog, monkeypatch):
    """``iceberg_catalog``: the catalog (SQLite, or a real PostgreSQL) records the table; a crash
    after the manifest rolls forward through it; status, verify and gc open it by pyiceberg's own
    configuration (the sink's catalog properties are never stored)."""
    from pyiceberg.catalog import load_catalog

    from streaming_exactly_once.iceberg.settings import IcebergCatalogRef

    name, props = sql_catalog
    ref = IcebergCatalogRef(name, "db.events")
    table = tmp_path / "t"
    storage = open_storage(str(table))
    opts = {"iceberg_catalog": ref, "iceberg_catalog_properties": tuple(sorted(props.items()))}
    first = iceberg_committer(storage, fail_at="after-manifest@2", **opts)
    commit_batch(first, Q, 0, ids_of(0))
    with pytest.raises(Exception, match="injected failure"):
        commit_batch(first, Q, 1, ids_of(1))
    first.close()
    second = iceberg_committer(storage, **opts)
    assert second.open().rolled_forward == [1]
    commit_batch(second, Q, 2, ids_of(2))
    second.close()
    loaded = load_catalog(name, **props).load_table("db.events")
    expected = Counter(i for b in range(3) for i in ids_of(b))
    assert Counter(loaded.scan().to_arrow().column("id").to_pylist()) == expected
    batches = sorted(int(s.summary["seo.batch-id"]) for s in loaded.metadata.snapshots)
    assert batches == [0, 1, 2]
    assert not (table / "metadata" / "version-hint.text").exists()  # the catalog's pointer is the truth
    for key, value in props.items():  # what `seo status/verify/gc` find: pyiceberg's configuration of the catalog
        monkeypatch.setenv(f"PYICEBERG_CATALOG__{name.upper()}__{key.upper()}", value)
    from pyiceberg.utils.config import Config

    monkeypatch.setattr("pyiceberg.catalog._ENV_CONFIG", Config())  # pyiceberg reads it at import: as a new `seo` process would
    assert table_status(storage)["iceberg"]["batchId"] == 2
    assert table_status(storage)["iceberg"]["catalog"] == f"{name}:db.events"
    assert verify_table(storage).problems == []
    retired(table, "p=a/orphan.parquet", b"x")
    report = collect_garbage(storage, older_than_ms=0, now_ms=int(time.time() * 1000) + 10_000)
    assert [u.rsplit("/", 1)[-1] for u, _ in report.orphans] == ["orphan.parquet"]
    assert Counter(load_catalog(name, **props).load_table("db.events").scan().to_arrow().column("id").to_pylist()) == expected


def test_seo_status_and_verify_of_a_table_with_both_formats(tmp_path, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    from pathlib import Path

    from tests.cli.test_cli import seo

    table = tmp_path / "t"
    committer = iceberg_committer(open_storage(str(table)), delta=True)
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    code, out, err = seo(capsys, "--json", "status", str(table))
    assert code == 0, err
    document = json.loads(out)
    schemas = Path(__file__).resolve().parents[2] / "docs" / "cli" / "schemas"
    jsonschema.validate(document, json.loads((schemas / "status.json").read_text()))
    assert document["iceberg"]["batchId"] == document["delta"]["batchId"] == 1
    code, out, err = seo(capsys, "status", str(table))
    assert code == 0, err
    assert "delta + iceberg (parquet files; _delta_log, metadata/ and _spark_metadata)" in out
    assert re.search(r"iceberg +snapshot \d+, holds batches up to 1; ", out), out
    code, out, err = seo(capsys, "verify", str(table))
    assert code == 0, out + err


@pytest.mark.torture
@pytest.mark.parametrize(
    "boundary",
    [
        "after-members",
        "after-commit",
        "mid-iceberg",
        pytest.param("before-iceberg", marks=pytest.mark.long),
        pytest.param("before-iceberg-publish", marks=pytest.mark.long),
    ],
)
def test_a_dataset_groups_iceberg_tables_roll_forward_after_sigkill(tmp_path, boundary):
    """A group with two Iceberg tables (and Delta too): the group's writer SIGKILLs itself after
    the members' manifests (``after-members`` is after their Delta and Iceberg steps too), inside
    a table's Iceberg commit (before its first manifest file, before and after its metadata
    version), or after the group's record; the next writer finishes the batch in every table
    and every log."""
    import signal

    from tests.commit.processes import QA, Writer, batch_rows, stop_all
    from tests.delta.readback import delta_ids

    root = tmp_path / "g"

    def program(name: str, steps: list[dict]) -> dict:
        return {**_program(name, root, steps, delta=True), "group": ["t0", "t1"]}

    writers: list[Writer] = []
    try:
        a = Writer(
            program(
                "A",
                [
                    {"do": "open"},
                    {"do": "commits", "query": QA, "count": 2, "rows": 6},
                    {"do": "commits", "query": QA, "count": 1, "rows": 6, "crash_at": boundary},
                    {"do": "hang"},
                ],
            )
        )
        writers.append(a)
        a.proc.wait(timeout=120)
        assert a.proc.returncode == -signal.SIGKILL, a.output()
        b = Writer(program("B", [{"do": "open", "retry_s": 10}, {"do": "commits", "query": QA, "count": 2, "rows": 6, "first": 3}, {"do": "close"}]))
        writers.append(b)
        assert b.wait(timeout=120) == 0, b.output()
    finally:
        stop_all(writers)
    ids = [i for sb in range(5) for i in batch_rows(0, sb, 6)]
    assert len(set(ids)) == len(ids)
    seen: Counter[int] = Counter()
    for t in ("t0", "t1"):
        table = root / t
        rows = pyiceberg_ids(table)
        assert rows == delta_ids(table) == Counter(read.arrow(str(table)).column("id").to_pylist())
        assert sorted(snapshots_by_batch(table)) == [1, 2, 3, 4]  # 5 batches, 4 snapshots kept
        seen += rows
    assert seen == Counter(ids)
    assert verify_table(open_storage(str(root))).errors == []


def test_our_commit_files_name_their_batch_and_no_other_writers_file_matches():
    import uuid

    from streaming_exactly_once.iceberg.commit_names import batch_commit_uuid, batch_of_file

    app = "streaming-exactly-once:abc"
    first, second = batch_commit_uuid(app, 41), batch_commit_uuid(app, 41)
    assert first != second and first.version == 8  # two attempts at one batch never share a name
    assert batch_of_file(f"{first}-m0.avro", app) == 41
    assert batch_of_file(f"snap-123-0-{second}.avro", app) == 41
    assert batch_of_file(f"{first}-m0.avro", "streaming-exactly-once:other") is None
    assert batch_of_file(f"{uuid.uuid4()}-m0.avro", app) is None  # pyiceberg's own, or another engine's
    assert batch_of_file("v3.metadata.json", app) is None


def test_seo_recover_deletes_what_a_commit_failed_before_its_metadata_file_left(tmp_path):
    from streaming_exactly_once.maintenance.repair import recover_table

    table = tmp_path / "t"
    storage = open_storage(str(table))
    first = iceberg_committer(storage, fail_at="before-iceberg-publish@2")
    commit_batch(first, Q, 0, ids_of(0))
    with pytest.raises(Exception, match="injected failure"):
        commit_batch(first, Q, 1, ids_of(1))
    first.close()
    written = {p.name for p in (table / "metadata").glob("*.avro")}
    assert len(written) >= 4  # batch 0's manifest and list, and the failed commit's
    assert "orphan" in [p.kind for p in verify_table(storage).problems]
    assert recover_table(storage).rolled_forward == [1]
    assert verify_table(storage).problems == []
    assert pyiceberg_ids(table) == Counter(i for b in range(2) for i in ids_of(b))


def test_a_fenced_writers_leftovers_go_at_the_next_open_and_other_writers_files_stay(tmp_path):
    """A frozen writer's commit of a batch its successor then committed afresh left its files
    (no claim of it is rolled forward): the next open deletes them - not a file another engine
    may be writing, nor one of a batch the table does not hold yet."""
    import uuid

    from streaming_exactly_once.iceberg.commit_names import batch_commit_uuid
    from streaming_exactly_once.maintenance.repair import recover_table

    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = iceberg_committer(storage)
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    app = json.loads((table / "_seo" / "table").read_text().splitlines()[1])["iceberg"]["appId"]
    zombie = table / "metadata" / f"{batch_commit_uuid(app, 1)}-m0.avro"
    ahead = table / "metadata" / f"snap-7-0-{batch_commit_uuid(app, 2)}.avro"
    foreign = table / "metadata" / f"{uuid.uuid4()}-m0.avro"
    for path in (zombie, ahead, foreign):
        path.write_bytes(b"Obj\x01")
    recover_table(storage)
    assert not zombie.exists() and ahead.exists() and foreign.exists()
    zombie.write_bytes(b"Obj\x01")
    reopened = iceberg_committer(storage)
    reopened.open()
    reopened.close()
    assert not zombie.exists() and ahead.exists() and foreign.exists()
    assert pyiceberg_ids(table) == Counter(i for b in range(2) for i in ids_of(b))


def test_seo_recover_of_a_group_root_deletes_its_iceberg_tables_leftovers(tmp_path):
    """A group's table holds batches 0-1; files named for its batch 1 (a killed commit's) go at
    `seo recover <root>`, those named for its batch 2 or for the other table's app id stay."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter, MemberBatch
    from streaming_exactly_once.iceberg.commit_names import batch_commit_uuid
    from streaming_exactly_once.iceberg.settings import IcebergSettings
    from streaming_exactly_once.maintenance.repair import recover_table
    from streaming_exactly_once.table.identity import read_identity

    root = tmp_path / "g"
    storage = open_storage(str(root))
    group = GroupCommitter(storage, CommitterOptions(heartbeat=False, iceberg=IcebergSettings(), partition_by=("p",)))
    group.open()
    for b in range(2):
        attempt = group.begin(Q, b, mode="rename")
        members = []
        for t in ("t0", "t1"):
            staged = f"{attempt.staging_dir}/data/{t}/p=a/part-{b}.parquet"
            buf = io.BytesIO()
            pq.write_table(pa.table({"id": pa.array([b * 10, b * 10 + 1], pa.int64())}), buf)
            storage.put_if_absent(staged, buf.getvalue())
            info = storage.info(staged)
            files = [StagedFile(final=f"p=a/part-{b}.parquet", size=info.size, mtime_ms=info.mtime_ms, staged=staged)]
            members.append(MemberBatch(table=t, files=files, rows=2, format="iceberg", partition_by=("p",), schema=SCHEMA))
        group.commit_group(attempt, members, input_files=[InputFile(source=0, path=f"file:///in/{b}.csv", timestamp=1)])
    group.close()
    app0, app1 = (read_identity(storage.child(t)).iceberg.app_id for t in ("t0", "t1"))
    meta = root / "t0" / "metadata"
    killed = meta / f"{batch_commit_uuid(app0, 1)}-m0.avro"
    ahead = meta / f"{batch_commit_uuid(app0, 2)}-m0.avro"
    other = meta / f"{batch_commit_uuid(app1, 0)}-m0.avro"
    for path in (killed, ahead, other):
        path.write_bytes(b"Obj\x01")
    recover_table(storage)
    assert (killed.exists(), ahead.exists(), other.exists()) == (False, True, True)


def test_a_zombie_whose_base_snapshot_expired_meanwhile_is_told_it_was_fenced(tmp_path):
    """A writer frozen inside its Iceberg commit wakes after its successor took the table over,
    rolled its batch forward and expired the snapshot it builds on (keep 2): its commit fails on
    the missing manifest list, and the error says what happened - it was fenced."""
    import threading

    from streaming_exactly_once.errors import WriterFencedError
    from streaming_exactly_once.testing.faults import FaultInjectingStorage, Rule, Where

    table = tmp_path / "t"
    frozen, go = threading.Event(), threading.Event()
    zombie_storage = FaultInjectingStorage(open_storage(str(table)))
    zombie = iceberg_committer(zombie_storage, keep=2)
    for b in range(2):
        commit_batch(zombie, Q, b, ids_of(b))
    # frozen where its commit reads the manifest list of the snapshot it builds on
    base_list = Where(("read_bytes",), r"^metadata/snap-[^/]+\.avro$", "before")
    zombie_storage.arm([Rule(base_list, "call", callback=lambda: (frozen.set(), go.wait(60)))])
    outcome: list[BaseException | None] = []

    def run_zombie() -> None:
        try:
            commit_batch(zombie, Q, 2, ids_of(2))
            outcome.append(None)
        except BaseException as exc:  # judged below
            outcome.append(exc)

    thread = threading.Thread(target=run_zombie)
    thread.start()
    assert frozen.wait(60)
    successor = iceberg_committer(open_storage(str(table)), keep=2)
    successor.lease.clock = lambda: time.time() + 3600  # the frozen writer's lease has expired
    assert successor.open().rolled_forward == [2]
    for b in range(3, 7):
        commit_batch(successor, Q, b, ids_of(b))
    successor.close()
    go.set()
    thread.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], WriterFencedError), outcome
    assert pyiceberg_ids(table) == Counter(i for b in range(7) for i in ids_of(b))
