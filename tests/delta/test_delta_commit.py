"""The Delta step of the commit protocol, without Spark: real Parquet files, a real Delta log
written by delta-rs, real processes killed with SIGKILL at the Delta step's boundaries.

What a Delta reader sees is read with delta-rs alone (``tests.delta.readback``); the log's
shape - one commit per manifest batch with our application transaction - is parsed with json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.protocol.step import StepContext
from streaming_exactly_once.commit.table_steps.format_step import CommitDelta
from streaming_exactly_once.delta.files import DeltaFile
from streaming_exactly_once.delta.target import DeltaTarget
from streaming_exactly_once.errors import ConfigError, DeltaSchemaMismatchError, DeltaTableError
from streaming_exactly_once.maintenance.gc import collect_garbage
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.delta.helpers import SCHEMA, commit_batch, delta_committer, parquet
from tests.delta.readback import app_id_of, batch_commits, delta_commits, delta_ids
from tests.readers.tables import retired

Q = "aaaaaaaa-0000-0000-0000-00000000000a"


def ids_of(batch: int, rows: int = 4) -> list[int]:
    return list(range(batch * 100, batch * 100 + rows))


def test_a_delta_commit_carries_its_batch_its_files_rows_and_the_tables_checkpoints(tmp_path):
    """What only Delta has (the contract of every format is tests/formats/test_contract.py)."""
    storage = open_storage(str(tmp_path / "t"))
    committer = delta_committer(storage, checkpoint_interval=3)
    for b in range(7):
        result = commit_batch(committer, Q, b, ids_of(b))
        assert result.status == "committed" and result.batch_id == b
    committer.close()
    table = tmp_path / "t"
    assert batch_commits(table) == {b: b for b in range(7)}  # version 0 creates the table with batch 0
    info = delta_commits(table)[5].info
    assert (info["seoBatchId"], info["queryId"], info["sparkBatchId"]) == ("5", Q, "5")
    assert [read.delta_version(str(table), as_of=b) for b in (0, 3, 6)] == [0, 3, 6]
    # table properties of the first batch: checkpoints every 3 versions keep log replay short
    # (written in the background: one behind the batches coalesces with the next one due)
    checkpoints = sorted(int(name[:20]) for name in os.listdir(table / "_delta_log") if name.endswith(".checkpoint.parquet"))
    assert checkpoints and checkpoints[-1] >= 5 and set(checkpoints) <= {2, 3, 4, 5, 6}, checkpoints
    # each add carries the row count of its file (from the Parquet footer)
    adds = [json.loads(line)["add"] for line in (table / "_delta_log" / "00000000000000000004.json").read_text().splitlines() if '"add"' in line]
    assert sorted(json.loads(a["stats"])["numRecords"] for a in adds) == [2, 2]


def test_a_damaged_last_checkpoint_hint_is_named_not_blamed_on_log_retention(tmp_path):
    """``_last_checkpoint`` pointing at a version without a checkpoint: Delta readers cannot load
    the log at the versions after that hint. The refusal says the commit is in the log and the
    log does not load there - not that retention removed it (every commit from version 0 is kept)."""
    from streaming_exactly_once.errors import InvalidAsOfError

    storage = open_storage(str(tmp_path / "t"))
    committer = delta_committer(storage, checkpoint_interval=5)
    for b in range(13):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    hint = tmp_path / "t" / "_delta_log" / "_last_checkpoint"
    data = json.loads(hint.read_text())
    checkpoints = {int(name[:20]) for name in os.listdir(hint.parent) if name.endswith(".checkpoint.parquet")}
    damaged = max(v for v in range(1, max(checkpoints)) if v not in checkpoints)  # a checkpoint exists above it
    data["version"] = damaged
    data.pop("checksum", None)
    hint.write_text(json.dumps(data))
    with pytest.raises(InvalidAsOfError) as refused:
        read.delta_version(str(tmp_path / "t"), as_of=damaged)
    assert "_last_checkpoint" in str(refused.value) and "retention" not in str(refused.value), refused.value


def test_the_delta_step_is_idempotent_and_never_commits_a_batch_twice(tmp_path):
    """A retried step, a roll-forward of a finished step and a stale writer all end at one commit."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = delta_committer(storage)
    commit_batch(committer, Q, 0, ids_of(0))
    committer.close()
    app = app_id_of(table)
    storage.put_if_absent("p=a/extra.parquet", parquet([900, 901]))
    info = storage.info("p=a/extra.parquet")
    step = CommitDelta(batch_id=1, app_id=app, files=[DeltaFile("p=a/extra.parquet", info.size, info.mtime_ms)], partition_by=("p",), schema=SCHEMA)
    ctx = StepContext(storage=storage, logs=None)  # type: ignore[arg-type]
    assert not step.verify(ctx)
    step.execute(ctx)
    assert step.verify(ctx)
    step.execute(ctx)  # a retry after the commit landed
    stale = StepContext(storage=storage, logs=None)  # type: ignore[arg-type]
    step.execute(stale)  # another process with its own snapshot
    # a writer whose snapshot predates the commit: delta-rs would rebase its commit onto version
    # 2 and retry; ours loses the race, reads the log again and finds the batch there
    import deltalake

    class Behind(DeltaTarget):
        stale = True

        def load(self, *, refresh=True):
            if self.stale:
                self.stale = False
                return deltalake.DeltaTable(str(table), version=0)
            return super().load(refresh=refresh)

    assert Behind(storage, app).commit(1, step.files, schema_json=SCHEMA, partition_by=("p",), metadata={}) == 1
    assert sorted(batch_commits(table)) == [0, 1]
    assert delta_ids(table) == Counter(ids_of(0) + [900, 901])


def _race_worker(table: str, app: str, path: str, size: int, mtime: int, go: str) -> None:
    from streaming_exactly_once.storage import open_storage as _open

    target = DeltaTarget(_open(table), app)
    target.load()
    while not os.path.exists(go):
        time.sleep(0.001)
    target.commit(1, [DeltaFile(path, size, mtime)], schema_json=SCHEMA, partition_by=("p",), metadata={})


@pytest.mark.torture
def test_processes_racing_to_commit_one_batch_adds_its_rows_once(tmp_path):
    """Four processes commit batch 1 at once. The commit file is created if absent and a lost race
    is never retried on the next version (``delta.target``): the batch is one version, its rows
    are there once for every Delta reader, and readers of changes see them once too."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = delta_committer(storage)
    commit_batch(committer, Q, 0, ids_of(0))
    committer.close()
    app = app_id_of(table)
    storage.put_if_absent("p=a/race.parquet", parquet([777]))
    info = storage.info("p=a/race.parquet")
    go = tmp_path / "go"
    code = (
        "import sys; sys.path.insert(0, %r); from tests.delta.test_delta_commit import _race_worker; "
        "_race_worker(%r, %r, 'p=a/race.parquet', %d, %d, %r)"
    ) % (str(Path(__file__).resolve().parents[2]), str(table), app, info.size, info.mtime_ms, str(go))
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    time.sleep(1.5)  # every worker has loaded version 0
    go.write_text("")
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    commits = delta_commits(table)
    carrying = [c for c in commits if (app, 1) in c.txns]
    assert len(carrying) == 1 and carrying[0].adds == ["p=a/race.parquet"] and not carrying[0].removes, carrying
    assert len(commits) == 2  # batch 0 and batch 1, once
    assert delta_ids(table)[777] == 1
    import polars as pl

    assert pl.read_delta(str(table)).get_column("id").to_list().count(777) == 1


def test_a_batch_that_does_not_fit_an_existing_table_is_refused_before_anything_is_written(tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int32()), "p": ["a"]}), partition_by=["p"])
    committer = delta_committer(open_storage(str(table)))
    with pytest.raises(DeltaSchemaMismatchError) as err:
        commit_batch(committer, Q, 0, ids_of(0))
    assert "column 'id' is long in the batch, integer in the table" in str(err.value)
    assert str(table / "_delta_log") in str(err.value)
    committer.close()
    assert DeltaTable(str(table)).version() == 0
    assert not (table / "_spark_metadata").exists() or not os.listdir(table / "_spark_metadata")
    assert not (table / "_seo" / "wal").exists() or not os.listdir(table / "_seo" / "wal")
    # other partitioning is a mismatch too
    other = tmp_path / "u"
    write_deltalake(str(other), pa.table({"id": pa.array([1], pa.int64()), "p": ["a"]}))
    second = delta_committer(open_storage(str(other)))
    with pytest.raises(DeltaSchemaMismatchError, match=r"partitioned by \[\], the sink by \['p'\]"):
        commit_batch(second, Q, 0, ids_of(0))
    second.close()


def test_tables_whose_features_an_append_would_break_are_refused(tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int64()), "p": ["a"]}), partition_by=["p"])
    DeltaTable(str(table)).alter.add_constraint({"positive_id": "id > 0"})
    committer = delta_committer(open_storage(str(table)))
    with pytest.raises(DeltaTableError, match="CHECK constraints"):
        commit_batch(committer, Q, 0, ids_of(0))
    committer.close()


def test_a_damaged_delta_log_is_named_and_nothing_is_committed(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = delta_committer(storage)
    commit_batch(committer, Q, 0, ids_of(0))
    committer.close()
    (table / "_delta_log" / "00000000000000000001.json").write_text('{"add": garbage')
    with pytest.raises(DeltaTableError) as err:
        delta_committer(storage).open()
    assert str(table / "_delta_log") in str(err.value) and "Restore" in str(err.value)
    report = verify_table(storage)
    assert [p.kind for p in report.problems] == ["delta-unreadable"]


def test_format_and_manifest_place_are_fixed_for_the_life_of_a_table(tmp_path):
    from tests.commit.helpers import make_committer

    table = tmp_path / "t"
    storage = open_storage(str(table))
    first = delta_committer(storage)
    commit_batch(first, Q, 0, ids_of(0))
    first.close()
    with pytest.raises(ConfigError, match="format='delta'"):
        make_committer(storage, partition_by=("p",)).open()
    with pytest.raises(ConfigError, match="spark_manifest"):
        delta_committer(storage, spark_manifest=False).open()
    plain = open_storage(str(tmp_path / "plain"))
    parquet_writer = make_committer(plain, partition_by=("p",))
    commit_batch(parquet_writer, Q, 0, ids_of(0), schema=None)
    parquet_writer.close()
    with pytest.raises(ConfigError, match="written without a Delta log"):
        delta_committer(plain).open()


def test_without_the_spark_manifest_the_manifest_is_private_and_every_reader_agrees(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = delta_committer(storage, spark_manifest=False)
    for b in range(3):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    assert not (table / "_spark_metadata").exists()
    assert sorted(n for n in os.listdir(table / "_seo" / "manifest") if not n.startswith(".")) == ["0", "1", "2"]
    expected = Counter(i for b in range(3) for i in ids_of(b))
    assert delta_ids(table) == expected
    assert Counter(read.arrow(str(table)).column("id").to_pylist()) == expected
    assert Counter(read.arrow(str(table), as_of=1).column("id").to_pylist()) == delta_ids(table, version=1)
    assert verify_table(storage).problems == []


def test_gc_deletes_only_files_no_delta_version_and_no_manifest_entry_names(tmp_path):
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, CommitProperties

    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = delta_committer(storage)
    commit_batch(committer, Q, 0, ids_of(0))
    committer.close()
    # a file another Delta writer appended (not in our manifest), one this sink retired and one
    # nobody names (another tool's: kept)
    storage.put_if_absent("p=b/foreign.parquet", parquet([5000]))
    retired(table, "p=b/orphan.parquet", parquet([6000]))
    storage.put_if_absent("p=b/stray.parquet", parquet([7000]))
    info = storage.info("p=b/foreign.parquet")
    dt = DeltaTable(str(table))
    dt.create_write_transaction(
        [AddAction("p=b/foreign.parquet", info.size, {"p": "b"}, info.mtime_ms, True, "")],
        "append",
        dt.schema(),
        ["p"],
        commit_properties=CommitProperties(max_commit_retries=0),
    )
    report = collect_garbage(storage, older_than_ms=0, now_ms=int(time.time() * 1000) + 10_000)
    assert [Path(u).name for u, _ in report.orphans] == ["orphan.parquet"]
    assert [Path(u).name for u, _ in report.foreign] == ["stray.parquet"] and (table / "p=b" / "stray.parquet").exists()
    assert (table / "p=b" / "foreign.parquet").exists() and not (table / "p=b" / "orphan.parquet").exists()
    assert delta_ids(table)[5000] == 1
    assert "delta-diverged" in [p.kind for p in verify_table(storage).problems]
