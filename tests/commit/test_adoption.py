"""A new table's directory that already holds data files: refused before anything is written, or
its Parquet files adopted as batch 0 (``adopt_existing_files``) - checked first (format, layout,
schema, against the stream too), published through a claim of their own before the first batch
stages anything, once.

The files are what users have there: pandas' ``to_parquet`` output, a Spark batch job's
``part-*.parquet`` under ``k=v`` directories."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once import read
from streaming_exactly_once.errors import ConfigError, ExistingFilesError, SchemaMismatchError
from streaming_exactly_once.maintenance.audit import audit_table
from streaming_exactly_once.maintenance.gc import collect_garbage
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.ledger import read_ledger
from streaming_exactly_once.table.schema_log import read_schema
from streaming_exactly_once.testing.faults import InjectedFailure
from tests.commit.helpers import make_committer, stage_file
from tests.commit.processes import SCHEMA_JSON

Q = "dddddddd-0000-0000-0000-000000000004"


def _pandas_files(root: Path, layout: dict[str, list[int]]) -> list[Path]:
    """One file per partition directory, as pandas writes them: ``{"p=x": [ids]}``."""
    out = []
    for directory, ids in layout.items():
        (root / directory).mkdir(parents=True, exist_ok=True)
        path = root / directory / "data.parquet"
        pd.DataFrame({"id": pd.array(ids, dtype="int64")}).to_parquet(path)
        out.append(path)
    return out


def _commit(c, spark_batch: int, ids: list[int], *, schema: str | None = SCHEMA_JSON, mode: str = "rename"):
    """One batch as the sink commits it (a batch Spark re-delivers after it committed is skipped)."""
    c.ensure_open()
    if c.is_committed(Q, spark_batch):
        return None
    c.adopt_existing(lambda: schema or SCHEMA_JSON)  # as the sink does before it stages a first batch
    with c.batch(Q, spark_batch, mode=mode) as attempt:
        c.storage.makedirs(attempt.staging_dir)
        buf = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
        staged = stage_file(c.storage, attempt, f"p=a/part-{spark_batch:05d}-{attempt.attempt}.c000.parquet", buf.getvalue().to_pybytes())
        return c.commit(attempt, [staged], num_rows=len(ids), schema=schema)


def _ids(root: Path, **kw) -> Counter:
    return Counter(read.arrow(str(root), **kw).column("id").to_pylist())


def test_a_directory_of_pandas_files_is_refused_and_nothing_is_written(tmp_path):
    root = tmp_path / "t"
    (path,) = _pandas_files(root, {"p=old": [1, 2]})
    before = sorted(os.listdir(root))
    with pytest.raises(ExistingFilesError) as caught:
        make_committer(open_storage(str(root)), partition_by=("p",)).open()
    err = caught.value
    assert err.example == f"file://{path}" and err.files == 1 and err.key == "adopt_existing_files"
    assert f"its directory holds 1 file(s) that readers of it would read, e.g. file://{path}" in str(err)
    assert "adopt_existing_files=True" in str(err) and "Nothing was written" in str(err)
    assert sorted(os.listdir(root)) == before  # no _seo, no lease, no manifest: the directory as it was
    assert pd.read_parquet(root)["id"].tolist() == [1, 2]


def test_a_dataset_groups_root_holding_files_is_refused_saying_to_move_them_away(tmp_path):
    """A group adopts no files (``DatasetSink`` refuses ``adopt_existing_files``): its refusal
    says to move them, not to pass the option."""
    from streaming_exactly_once.commit.committer import CommitterOptions
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter

    root = tmp_path / "g"
    _pandas_files(root, {"p=old": [1, 2]})
    before = sorted(os.listdir(root))
    with pytest.raises(ExistingFilesError) as caught:
        GroupCommitter(open_storage(str(root)), CommitterOptions(heartbeat=False)).open()
    assert "A dataset group adopts no files: move them away" in str(caught.value)
    assert "pass adopt_existing_files=True" not in str(caught.value) and "Nothing was written" in str(caught.value)
    assert sorted(os.listdir(root)) == before


def test_a_file_landing_in_a_dataset_groups_root_after_the_open_is_refused_before_its_first_batch(tmp_path):
    from streaming_exactly_once.commit.committer import CommitterOptions
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter

    root = tmp_path / "g"
    c = GroupCommitter(open_storage(str(root)), CommitterOptions(heartbeat=False))
    c.open()
    _pandas_files(root, {"p=late": [1]})
    with pytest.raises(ExistingFilesError, match="A dataset group adopts no files: move them away"):
        c.adopt_existing(lambda: SCHEMA_JSON)  # as the sink does before it stages a first batch
    c.close()
    assert not (root / "_spark_metadata").exists()


def test_files_that_appear_before_the_first_batch_are_refused_under_the_lease_too(tmp_path):
    """A table of ours without a batch yet (an earlier start that wrote nothing): the check runs
    again under the lease, after recovery."""
    root = tmp_path / "t"
    c = make_committer(open_storage(str(root)), partition_by=("p",))
    c.open()
    c.close()
    _pandas_files(root, {"p=old": [1]})
    with pytest.raises(ExistingFilesError):
        make_committer(open_storage(str(root)), partition_by=("p",)).open()
    assert not (root / "_spark_metadata").exists()


@pytest.mark.parametrize("adopt", [False, True])
def test_files_that_land_after_the_open_and_before_the_first_batch_are_refused_or_adopted(tmp_path, adopt):
    """The writer opened an empty directory; a file lands there before its first batch: refused
    (nothing written), or with ``adopt_existing_files`` adopted by the adoption batch."""
    root = tmp_path / "t"
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=adopt)
    c.open()
    _pandas_files(root, {"p=late": [1000]})
    if not adopt:
        with pytest.raises(ExistingFilesError):
            _commit(c, 0, [1])
        c.close()
        assert not (root / "_spark_metadata").exists()
        return
    _commit(c, 0, [1])
    c.close()
    assert _ids(root) == Counter([1000, 1]) and _ids(root, as_of=0) == Counter([1000])


def test_hidden_files_are_no_reason_to_refuse(tmp_path):
    root = tmp_path / "t"
    (root / "_temporary").mkdir(parents=True)
    (root / "_SUCCESS").write_bytes(b"")
    (root / ".part-0.crc").write_bytes(b"x")
    c = make_committer(open_storage(str(root)), partition_by=("p",))
    _commit(c, 0, [1])
    c.close()
    assert _ids(root) == Counter([1])


def test_the_files_are_adopted_in_a_batch_of_their_own_before_the_first_batch_once(tmp_path):
    root = tmp_path / "t"
    _pandas_files(root, {"p=old": [1000, 1001], "p=older": [1002]})
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True)
    c.open()
    assert c.adoption is not None and len(c.adoption.files) == 2 and c.adoption.rows == 3
    result = _commit(c, 0, [1, 2])
    assert result.record.batch_id == 1 and result.record.table_rows == 5 and result.record.num_rows == 2  # its rows are its own
    _commit(c, 1, [3])
    c.close()
    assert _ids(root) == Counter([1000, 1001, 1002, 1, 2, 3])
    assert _ids(root, as_of=0) == Counter([1000, 1001, 1002]) and _ids(root, as_of=1) == Counter([1000, 1001, 1002, 1, 2])
    adoption, first = read.batches(str(root))[:2]  # what `seo log` shows: the adoption's rows and files are its own
    assert (adoption.query_id, adoption.num_rows, adoption.num_files) == ("00000000-0000-0000-0000-00000000ad07", 3, 2)
    assert adoption.num_bytes == sum(p.stat().st_size for p in root.glob("p=old*/data.parquet"))
    assert (first.num_rows, first.num_files) == (2, 1)
    record = read_schema(open_storage(str(root)), 0)
    assert record is not None and record.reason == "adopt" and [f["name"] for f in json.loads(record.schema)["fields"]] == ["id", "p"]
    assert verify_table(open_storage(str(root))).problems == []
    # batch 0's ledger names the adopted files apart from any rows, and the audit holds them
    ledger = read_ledger(open_storage(str(root)), 0)
    assert ledger is not None and sorted(f.path.split("/")[0] for f in ledger.adopted) == ["p=old", "p=older"]
    assert ledger.rows_written == 0 and all(f.checksum.startswith("crc32:") for f in ledger.adopted)
    assert audit_table(open_storage(str(root)), from_batch=0, record=False).violations == []
    adopted = root / ledger.adopted[0].path
    original = adopted.read_bytes()
    adopted.write_bytes(b"changed")  # a change to an adopted file is named
    assert [v.path for v in audit_table(open_storage(str(root)), from_batch=0, record=False).violations] == [ledger.adopted[0].path]
    adopted.write_bytes(original)
    # a restart with the option still on adopts nothing twice, and a file put there now is foreign
    _pandas_files(root, {"p=late": [5000]})
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True)
    _commit(c, 2, [4])
    c.close()
    assert _ids(root) == Counter([1000, 1001, 1002, 1, 2, 3, 4])
    assert [(p.kind, p.path.rsplit("/", 2)[-2]) for p in verify_table(open_storage(str(root))).problems] == [("foreign-file", "p=late")]
    report = collect_garbage(open_storage(str(root)), older_than_ms=0)
    assert report.orphans == [] and (root / "p=late" / "data.parquet").exists()


@pytest.mark.parametrize("fail_at", ["before-wal@1", "after-wal@1", "after-manifest@1", "after-commit@1"])
def test_a_failed_adoption_batch_adopts_every_file_once_after_recovery(tmp_path, fail_at):
    """Before the claim nothing is adopted (the next writer plans it again); after it the batch
    rolls forward with the adopted files - never twice, never half. The first batch has staged
    nothing yet: a reader sees the files, whether the adoption's manifest is there or not."""
    root = tmp_path / "t"
    _pandas_files(root, {"p=old": [1000, 1001]})
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True, fail_at=fail_at)
    with pytest.raises(InjectedFailure):
        _commit(c, 0, [1, 2])
    c.close()
    seen_now = _ids(root) if (root / "_spark_metadata" / "0").exists() else Counter(pd.read_parquet(root / "p=old")["id"])
    assert seen_now == Counter([1000, 1001]) and not list(root.glob("p=a"))
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True)
    _commit(c, 0, [1, 2])  # Spark re-delivers the batch: skipped if it committed
    _commit(c, 1, [3])
    c.close()
    assert _ids(root) == Counter([1000, 1001, 1, 2, 3])
    assert verify_table(open_storage(str(root))).problems == []


def test_a_file_the_stream_does_not_fit_is_refused_before_the_claim(tmp_path):
    root = tmp_path / "t"
    (root / "p=old").mkdir(parents=True)
    pd.DataFrame({"id": ["a", "b"]}).to_parquet(root / "p=old" / "data.parquet")  # ids as strings
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True)
    with pytest.raises(SchemaMismatchError) as caught:
        _commit(c, 0, [1])
    assert f"schema in the existing files it adopts, e.g. file://{root}/p=old/data.parquet" in str(caught.value)
    assert "Nothing was written" in str(caught.value)
    c.close()
    assert not (root / "_spark_metadata").exists() and not list((root / "_seo" / "wal").glob("*"))


def test_a_stream_with_columns_the_files_lack_needs_schema_evolution(tmp_path):
    root = tmp_path / "t"
    _pandas_files(root, {"p=old": [1000]})
    extra = json.dumps(
        {"type": "struct", "fields": [*json.loads(SCHEMA_JSON)["fields"], {"name": "note", "type": "string", "nullable": True, "metadata": {}}]}
    )
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True)
    with pytest.raises(SchemaMismatchError, match="note"):
        _commit(c, 0, [1], schema=extra)
    c.close()
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True, schema_evolution="add_columns")
    _commit(c, 0, [1], schema=extra)
    c.close()
    assert _ids(root) == Counter([1000, 1])
    # the adoption holds the files' columns; the first batch adds the stream's own
    assert read.arrow(str(root), as_of=0).column_names == ["id", "p"] and "note" in read.arrow(str(root)).column_names
    adopted, evolved = read_schema(open_storage(str(root)), 0), read_schema(open_storage(str(root)), 1)
    assert adopted is not None and adopted.reason == "adopt" and [f["name"] for f in json.loads(adopted.schema)["fields"]] == ["id", "p"]
    assert evolved is not None and evolved.reason == "evolve" and "note" in [f["name"] for f in json.loads(evolved.schema)["fields"]]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda root: (root / "p=x").mkdir() or (root / "p=x" / "README.txt").write_text("hello"), "README.txt is not a complete Parquet file"),
        (lambda root: _pandas_files(root, {"": [1]}), "is not laid out as the table's files are (<table>/p=<value>/<file>"),
        (lambda root: _pandas_files(root, {"2024/p=x": [1]}), "is not laid out as the table's files are"),
        (
            lambda root: (
                (root / "p=x").mkdir(parents=True) or pd.DataFrame({"ts": pd.to_datetime(["2026-01-01"])}).to_parquet(root / "p=x" / "f.parquet")
            ),
            "has column 'ts': nanosecond timestamps, which Spark cannot read",
        ),
        (
            lambda root: (root / "p=x").mkdir(parents=True) or pd.DataFrame({"id": [1], "p": ["x"]}).to_parquet(root / "p=x" / "f.parquet"),
            "holds the partition column(s) ['p'] as columns too",
        ),
    ],
    ids=["not-parquet", "outside-partitions", "other-directories", "nanoseconds", "partition-column-inside"],
)
def test_what_cannot_be_adopted_is_named_and_nothing_is_written(tmp_path, make, expected):
    root = tmp_path / "t"
    root.mkdir()
    make(root)
    with pytest.raises(ConfigError) as caught:
        make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True).open()
    assert expected in str(caught.value), str(caught.value)
    assert "Nothing was written" in str(caught.value)
    assert not (root / "_spark_metadata").exists()


@pytest.mark.parametrize(
    ("type_", "good", "bad"),
    [
        ("integer", "7", "abc"),
        ("integer", "7", "+3"),
        ("integer", "-7", "3000000000"),
        ("date", "2026-01-01", "notadate"),
        ("date", "2026-01-01", "20260101"),
    ],
)
def test_a_partition_value_the_stream_s_type_cannot_read_is_refused_before_anything_is_adopted(tmp_path, type_, good, bad):
    """Readers cast a directory's value to the partition column's type: ``p=abc`` under an
    integer ``p`` would fail every one of them, so the file is named and nothing is written."""
    root = tmp_path / "t"
    _pandas_files(root, {f"p={good}": [1000], f"p={bad}": [1001]})
    typed = json.dumps(
        {"type": "struct", "fields": [json.loads(SCHEMA_JSON)["fields"][0], {"name": "p", "type": type_, "nullable": True, "metadata": {}}]}
    )
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True)
    with pytest.raises(ConfigError) as caught:
        c.adopt_existing(lambda: typed)
    c.close()
    assert f"{root}/p={bad}/data.parquet is in partition directory p={bad}, not a {type_} value" in str(caught.value), str(caught.value)
    assert "Nothing was written" in str(caught.value)
    assert not (root / "_spark_metadata").exists() and not list((root / "_seo" / "wal").glob("*"))


def test_files_of_two_schemas_are_refused_naming_both(tmp_path):
    root = tmp_path / "t"
    _pandas_files(root, {"p=a": [1]})
    (root / "p=b").mkdir()
    pd.DataFrame({"id": [2], "extra": ["x"]}).to_parquet(root / "p=b" / "data.parquet")
    with pytest.raises(SchemaMismatchError) as caught:
        make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True).open()
    assert "do not share one schema" in str(caught.value) and "p=a/data.parquet" in str(caught.value) and "p=b/data.parquet" in str(caught.value)
    assert "['extra']" in str(caught.value)


def test_the_directory_is_listed_again_right_before_the_claim(tmp_path):
    """What is there at the first batch is adopted: a file added since the writer opened the
    table too, a file removed since not (its entry would name a missing file)."""
    root = tmp_path / "t"
    first, gone = _pandas_files(root, {"p=a": [1000], "p=b": [1001]})
    c = make_committer(open_storage(str(root)), partition_by=("p",), adopt_existing_files=True)
    c.open()
    gone.unlink()
    _pandas_files(root, {"p=c": [1002]})
    _commit(c, 0, [1])
    c.close()
    assert _ids(root) == Counter([1000, 1002, 1])
    assert verify_table(open_storage(str(root))).problems == []


@pytest.mark.parametrize("formats", ["delta", "iceberg", "delta+iceberg"])
def test_a_delta_or_iceberg_table_adopts_the_files_in_its_first_commit_too(tmp_path, formats):
    """Every reader agrees: the manifest's, delta-rs and pyiceberg each see the adopted rows once."""
    from tests.delta.helpers import commit_batch
    from tests.iceberg.table_helpers import iceberg_committer, pyiceberg_ids

    root = tmp_path / "t"
    _pandas_files(root, {"p=old": [1000, 1001], "p=older": [1002]})
    storage = open_storage(str(root))
    if formats == "delta":
        from tests.delta.helpers import delta_committer

        c = delta_committer(storage, adopt_existing_files=True)
    else:
        c = iceberg_committer(storage, delta=formats == "delta+iceberg", adopt_existing_files=True)
    commit_batch(c, Q, 0, [1, 2])
    commit_batch(c, Q, 1, [3])
    c.close()
    expected = Counter([1000, 1001, 1002, 1, 2, 3])
    assert _ids(root) == expected
    if "delta" in formats:
        from tests.delta.readback import delta_ids

        assert delta_ids(root) == expected and delta_ids(root, version=0) == Counter([1000, 1001, 1002])
        assert delta_ids(root, version=1) == Counter([1000, 1001, 1002, 1, 2])
    if "iceberg" in formats:
        assert pyiceberg_ids(root) == expected
    assert verify_table(storage).problems == []


def test_an_existing_delta_table_is_still_adopted_by_its_format_and_the_option_adds_nothing(tmp_path):
    """A delta-rs table's files are its Delta log's: ``format="delta"`` takes them over as before,
    with or without ``adopt_existing_files`` (its files are no strangers to be refused)."""
    from deltalake import write_deltalake

    from tests.delta.helpers import commit_batch, delta_committer
    from tests.delta.readback import delta_ids

    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": pa.array([7, 8], pa.int64()), "p": ["x", "x"]}), partition_by=["p"])
    for adopt in (False, True):
        target = tmp_path / f"copy-{adopt}"
        shutil.copytree(root, target)
        c = delta_committer(open_storage(str(target)), adopt_existing_files=adopt)
        commit_batch(c, Q, 0, [1, 2])
        c.close()
        assert _ids(target) == delta_ids(target) == Counter([7, 8, 1, 2])
