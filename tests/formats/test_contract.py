"""One contract for every table format (``tests.formats.contract`` says how each is driven and
read): each batch is one commit of the format and every reader agrees at every batch; a replay
adds nothing; a lost commit is found before anything goes on top of it; an existing table is
adopted with its rows; a failure - or a SIGKILL - at the format's boundaries rolls forward to
each row once; a batch that adds a column adds it in its own commit; the WAL line of the step
reads back. Format-specific behaviour stays in tests/delta and tests/iceberg."""

from __future__ import annotations

import json
import signal
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.protocol.sequence import CommitSequence
from streaming_exactly_once.commit.protocol.step import StepContext
from streaming_exactly_once.errors import InvalidAsOfError, LogCorruptError, SchemaMismatchError
from streaming_exactly_once.maintenance.status import table_status
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.attempt_key import AttemptKey
from streaming_exactly_once.table.table_logs import TableLogs
from tests.delta.helpers import SCHEMA, commit_batch
from tests.formats.contract import FORMATS, FormatUnderTest, app_id_of
from tests.iceberg.table_helpers import Q, ids_of

BY_NAME = {f.name: f for f in FORMATS}
PROTOCOL_BOUNDARIES = ("after-wal", "mid-move", "after-manifest", "after-sources", "after-commit")


@pytest.fixture(params=[f.name for f in FORMATS])
def fmt(request) -> FormatUnderTest:
    return BY_NAME[request.param]


def rows(batches) -> Counter[int]:
    return Counter(i for b in batches for i in ids_of(b))


def test_each_batch_is_one_commit_of_the_format_and_every_reader_agrees_at_every_batch(fmt, tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = fmt.committer(storage)
    for b in range(5):
        result = commit_batch(committer, Q, b, ids_of(b))
        assert result.status == "committed" and result.batch_id == b
    committer.close()
    commits = fmt.commits(table)
    assert sorted(commits) == list(range(5)) and len(set(commits.values())) == 5
    for b in range(5):
        assert fmt.ids(table, batch=b) == rows(range(b + 1)) == Counter(read.arrow(str(table), as_of=b).column("id").to_pylist())
    record = json.loads((table / "_seo" / "commits" / "4").read_text().splitlines()[1])
    assert record[fmt.record_key] == commits[4]  # the commit record names the format's commit
    assert verify_table(storage).problems == []
    assert table_status(storage)[fmt.name]["batchId"] == 4


def commit_nothing(committer, spark_batch: int) -> None:
    """A batch that wrote no file, as a query's first batch records where it starts."""
    committer.ensure_open()
    committer.adopt_existing(lambda: SCHEMA)
    with committer.batch(Q, spark_batch, mode="rename") as attempt:
        committer.commit(attempt, [], input_files=[], num_rows=0, schema=SCHEMA, no_data=True)


def test_before_the_first_batch_with_a_file_the_format_has_no_commit_and_as_of_says_why(fmt, tmp_path):
    """A query's first batches may write no row: the format's log starts at the first batch with
    a file. As of an earlier batch the table is empty, and asking for the format's commit of it
    says that - not that log retention or snapshot expiry removed it."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = fmt.committer(storage)
    for b in range(2):
        commit_nothing(committer, b)
        with pytest.raises(InvalidAsOfError, match=f"batch {b} holds no file, nor does any batch before it") as refused:
            fmt.version_of(table, b)  # no log of the format yet, then none that holds batch b
        assert "retention" not in str(refused.value) and "expiry" not in str(refused.value), refused.value
    commit_batch(committer, Q, 2, ids_of(2))
    committer.close()
    assert sorted(fmt.commits(table)) == [2] and fmt.version_of(table, 2) == fmt.commits(table)[2]
    for b in range(2):
        assert read.arrow(str(table), as_of=b).num_rows == 0
        with pytest.raises(InvalidAsOfError, match=f"batch {b} holds no file, nor does any batch before it"):
            fmt.version_of(table, b)
    assert fmt.ids(table, batch=2) == rows([2])
    assert verify_table(storage).problems == []


def test_a_replayed_batch_adds_no_commit_and_no_row(fmt, tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = fmt.committer(storage)
    for b in range(3):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    before = fmt.commits(table)
    again = fmt.committer(storage)
    assert commit_batch(again, Q, 1, ids_of(1)) is None  # the writer knows the Spark batch
    again.close()
    # the format's step of batch 1 again, other files, a fresh context (a roll-forward of a step
    # that was done): verify says done, and execute adds nothing
    step = fmt.step(1, app_id_of(table, fmt.name), [("p=a/replayed.parquet", 10, 1)], SCHEMA)
    ctx = StepContext(storage=storage, logs=TableLogs.open(storage))
    assert step.verify(ctx)
    step.execute(ctx)
    assert fmt.commits(table) == before
    assert fmt.ids(table) == rows(range(3)) == Counter(read.arrow(str(table)).column("id").to_pylist())


def test_a_lost_commit_of_the_format_is_an_error_at_open_and_in_verify(fmt, tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = fmt.committer(storage)
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    fmt.lose_newest_commit(table)
    with pytest.raises(fmt.error, match="holds batches up to 0 .* manifest holds batches up to 1"):
        fmt.committer(storage).open()
    kinds = {p.kind: p.severity for p in verify_table(storage).problems}
    assert kinds[f"{fmt.name}-behind"] == "error"


def test_an_existing_table_of_the_format_is_adopted_and_keeps_its_rows(fmt, tmp_path):
    table = tmp_path / "t"
    options = fmt.write_existing(table, [-1, -2, -3, -4])
    storage = open_storage(str(table))
    committer = fmt.committer(storage, **options)
    for b in range(3):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    expected = Counter([-1, -2, -3, -4]) + rows(range(3))
    assert fmt.ids(table) == expected
    assert Counter(read.arrow(str(table)).column("id").to_pylist()) == expected  # _spark_metadata names the old files too
    assert sorted(fmt.commits(table)) == [0, 1, 2]
    assert verify_table(storage).errors == []  # (pyiceberg writes the partition column into its files: a warning)


CASES = [
    (f.name, b, m) for f in FORMATS for b in PROTOCOL_BOUNDARIES + f.boundaries for m in ("rename", "direct") if (b, m) != ("mid-move", "direct")
]


@pytest.mark.parametrize(("name", "boundary", "mode"), CASES)
def test_a_failure_at_a_boundary_then_restart_commits_each_batch_once(tmp_path, name, boundary, mode):
    fmt = BY_NAME[name]
    table = tmp_path / "t"
    storage = open_storage(str(table))
    first = fmt.committer(storage, fail_at=f"{boundary}@2")
    commit_batch(first, Q, 0, ids_of(0), mode=mode)
    with pytest.raises(Exception, match="injected failure"):
        commit_batch(first, Q, 1, ids_of(1), mode=mode)
    first.close()
    problems = {p.kind: p.severity for p in verify_table(storage).problems}
    assert "error" not in problems.values(), problems  # a pending claim is no damage: the next start completes it
    second = fmt.committer(storage)
    assert second.open().rolled_forward == [1]  # claimed in the WAL: only forward from here
    for b in (1, 2):
        commit_batch(second, Q, b, ids_of(b), mode=mode)
    second.close()
    assert fmt.ids(table) == rows(range(3)) == Counter(read.arrow(str(table)).column("id").to_pylist())
    assert sorted(fmt.commits(table)) == [0, 1, 2]
    assert verify_table(storage).problems == []


def _program(fmt: FormatUnderTest, name: str, root, steps: list[dict]) -> dict:
    return {"name": name, "root": str(root), **fmt.program, "options": {"lease_timeout_ms": 1500}, "steps": steps}


KILLS = [(f.name, b) for f in FORMATS for b in ("after-wal", "after-manifest", "after-manifest+2ms", *f.boundaries, "after-commit")]


@pytest.mark.torture
@pytest.mark.parametrize(("name", "boundary"), KILLS)
def test_sigkill_around_the_format_step_rolls_forward_exactly_once(tmp_path, name, boundary):
    """A writer SIGKILLs itself at the 3rd batch's boundary; the next writer recovers and goes on.
    Every row is counted once by the format's reader and by ours."""
    from tests.commit.processes import QA, Writer, batch_rows, stop_all

    fmt = BY_NAME[name]
    table = tmp_path / "t"
    writers: list[Writer] = []
    try:
        a = Writer(
            _program(
                fmt,
                "A",
                table,
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
        steps = [{"do": "open", "retry_s": 10}, {"do": "commits", "query": QA, "count": 3, "rows": 6, "first": 3}, {"do": "close"}]
        b = Writer(_program(fmt, "B", table, steps))
        writers.append(b)
        assert b.wait(timeout=120) == 0, b.output()
        assert all(c["status"] in ("committed", "duplicate") for c in b.commits()), b.output()
    finally:
        stop_all(writers)
    assert "rolled_forward=[2]" in b.events("open")[0]["recovery"], b.output()
    ids = [i for sb in range(6) for i in batch_rows(0, sb, 6)]
    assert len(set(ids)) == len(ids)  # unique row ids: a count of 1 each is exactly once
    assert fmt.ids(table) == Counter(ids) == Counter(read.arrow(str(table)).column("id").to_pylist())
    report = verify_table(open_storage(str(table)))
    assert report.errors == [] and [p.path for p in report.problems if p.kind == "orphan"] == []


def test_a_batch_that_adds_a_column_adds_it_in_its_own_commit(fmt, tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = fmt.committer(storage, schema_evolution="add_columns")
    commit_batch(committer, Q, 0, ids_of(0))
    wider = json.loads(SCHEMA)
    wider["fields"].append({"name": "extra", "type": "string", "nullable": True, "metadata": {}})
    commit_batch(committer, Q, 1, ids_of(1), schema=json.dumps(wider))
    committer.close()
    assert fmt.columns(table, batch=0) == ["id", "p"]
    assert fmt.columns(table, batch=1) == ["id", "p", "extra"]  # the commit of batch 1 is the one that added it
    assert fmt.ids(table) == rows(range(2))
    assert verify_table(storage).problems == []


def test_a_batch_the_schema_refuses_gets_the_formats_own_error_naming_the_format(fmt, tmp_path):
    """An Iceberg table's refusal is an ``IcebergSchemaMismatchError`` that says "Iceberg table"
    (it was Delta's error, naming a Delta table); both are ``SchemaMismatchError``."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = fmt.committer(storage)
    commit_batch(committer, Q, 0, ids_of(0))
    wider = json.loads(SCHEMA)
    wider["fields"].append({"name": "extra", "type": "string", "nullable": True, "metadata": {}})
    with pytest.raises(SchemaMismatchError) as caught:
        commit_batch(committer, Q, 1, ids_of(1), schema=json.dumps(wider))
    committer.close()
    assert isinstance(caught.value, fmt.error), type(caught.value).__name__
    other = "Iceberg" if fmt.name == "delta" else "Delta"
    assert f"schema of {fmt.name.capitalize()} table " in str(caught.value) and other not in str(caught.value)
    assert fmt.ids(table) == rows(range(1)) and sorted(fmt.commits(table)) == [0]  # nothing of batch 1


def test_a_wal_entry_with_the_format_step_is_versioned_and_reads_back(fmt):
    step = fmt.step(4, "streaming-exactly-once:x", [("p=a/f.parquet", 10, 5)], SCHEMA)
    seq = CommitSequence(key=AttemptKey(4, "q", 1, 1, "a", "rename"), staging_dir="s", created_ms=1, steps=[step])
    data = seq.to_bytes()
    assert data.startswith(f"v{fmt.wal_version}\n".encode()) and f'{{"kind":"{fmt.name}","batchId":4,'.encode() in data
    assert CommitSequence.from_bytes(data, path="wal/4", batch_id=4).steps == [step]
    plain = CommitSequence(key=AttemptKey(4, "q", 1, 1, "a", "rename"), staging_dir="s", created_ms=1)
    assert plain.to_bytes().startswith(b"v3\n")  # tables without a format stay readable by older releases
    with pytest.raises(LogCorruptError, match="not a path inside the table"):
        CommitSequence.from_bytes(data.replace(b'"p=a/f.parquet"', b'"../escape.parquet"'), path="wal/4", batch_id=4)
