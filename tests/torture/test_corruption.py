"""Damaged log files: a named error that says which file and what to do - never a silent skip,
never a duplicate, and no committed data lost. Where a repair is safe, the named command works."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from streaming_exactly_once import read
from streaming_exactly_once.commit.protocol.sequence import CommitSequence
from streaming_exactly_once.errors import ConcurrentWriterError, ExactlyOnceError, LogCorruptError, MissingBatchError, UnsupportedLogVersionError
from streaming_exactly_once.maintenance.repair import discard_wal, rebuild_logs
from streaming_exactly_once.table.identity import read_identity
from streaming_exactly_once.testing.faults import InjectedFailure
from tests.commit.helpers import make_committer, stage_and_commit, visible_rows

Q = "66666666-6666-6666-6666-666666666666"

TARGETS = {
    "manifest-delta": "_spark_metadata/6",
    "manifest-compact": "_spark_metadata/5.compact",
    "offsets": "_seo/offsets/6",
    "commits-delta": "_seo/commits/6",
    "commits-compact": "_seo/commits/5.compact",
    "sources": "_seo/sources/6",
    "identity": "_seo/table",
    "lease-epoch": "_seo/epochs/1",
    "lease-heartbeat": "_seo/heartbeats/1",
}
DAMAGE = ["empty", "truncated", "garbage", "newer-version", "missing", "deep-json"]
DEEP = b'v1\n{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def build(storage, batches=7):
    c = make_committer(storage, compact_interval=3)
    for b in range(batches):
        stage_and_commit(c, Q, b, list(range(b * 10, b * 10 + 10)))
    c.close()
    return sorted(range(batches * 10))


def damage(storage, path, how):
    data = storage.read_bytes(path)
    if how == "missing":
        storage.delete(path)
        return
    new = {
        "empty": b"",
        "truncated": data[: max(3, len(data) - 25)],
        "garbage": b"\x00\xff\xfe\x01 not a log",
        "newer-version": b"v9" + data[2:],
        "deep-json": DEEP,  # valid JSON; Python's decoder raises RecursionError on it (r06b)
    }[how]
    storage.atomic_write(path, new)


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_damaged_file_gives_a_named_error_or_is_harmless(local_storage, target, how):
    storage = local_storage
    expected = build(storage)
    path = TARGETS[target]
    damage(storage, path, how)
    opener = make_committer(storage, compact_interval=3)
    if target == "lease-heartbeat" and how == "missing":
        # without a heartbeat the writer counts as alive until its epoch's start + lease timeout
        # (it is this very process): the safe answer is "another writer", never a takeover
        with pytest.raises(ConcurrentWriterError, match="lease expires"):
            opener.open()
        return
    harmless = (target == "lease-epoch" and how == "missing") or (target == "identity" and how == "missing")
    if harmless:
        # no writer record means no writer: a new epoch starts; a lost identity is recreated
        opener.open()
        stage_and_commit(opener, Q, 7, list(range(70, 80)))
        assert visible_rows(storage) == expected + list(range(70, 80))
        return
    with pytest.raises(ExactlyOnceError) as err:
        opener.open()
        stage_and_commit(opener, Q, 7, list(range(70, 80)))
    message = str(err.value)
    assert isinstance(err.value, (LogCorruptError, UnsupportedLogVersionError, MissingBatchError)), type(err.value)
    name = path.rsplit("/", 1)[0] if how == "missing" else path
    assert name in message, message
    assert any(hint in message for hint in ("seo ", "backup", "upgrade", "delete this file")), message
    # nothing was published on top of the damage ...
    if target.startswith("manifest"):
        with pytest.raises(ExactlyOnceError):
            read.files(storage.root_uri)
    else:
        # ... and no committed data is lost: readers still see exactly the committed rows
        assert visible_rows(storage) == expected


def test_missing_commit_records_are_rebuilt_by_the_named_command(local_storage):
    storage = local_storage
    expected = build(storage)
    storage.delete("_seo/commits/6")
    storage.delete("_seo/sources/6")
    with pytest.raises(LogCorruptError, match="--rebuild-logs"):
        make_committer(storage, compact_interval=3).open()
    report = rebuild_logs(storage)
    assert report.commits == [6] and report.unprotected_batches == [6]
    c = make_committer(storage, compact_interval=3)
    assert stage_and_commit(c, Q, 6, [999]) is None  # the replay of batch 6 is still recognised
    stage_and_commit(c, Q, 7, list(range(70, 80)))
    assert visible_rows(storage) == expected + list(range(70, 80))


@pytest.mark.parametrize("how", ["empty", "truncated", "garbage", "newer-version"])
def test_damaged_wal_entry_names_the_discard_command(local_storage, how):
    storage = local_storage
    expected = build(storage)
    failing = make_committer(storage, compact_interval=3, fail_at="after-wal@1")
    with pytest.raises(InjectedFailure):
        stage_and_commit(failing, Q, 7, list(range(70, 80)))
    failing.close()
    damage(storage, "_seo/wal/7", how)
    with pytest.raises(ExactlyOnceError) as err:
        make_committer(storage, compact_interval=3).open()
    assert "_seo/wal/7" in str(err.value) and "--discard-wal" in str(err.value) or "upgrade" in str(err.value)
    assert visible_rows(storage) == expected  # never half-published
    discard_wal(storage, 7)  # safe: manifest batch 7 was never written
    c = make_committer(storage, compact_interval=3)
    stage_and_commit(c, Q, 7, list(range(70, 80)))  # Spark re-runs the batch
    assert visible_rows(storage) == expected + list(range(70, 80))


def test_discarding_a_published_batch_is_refused(local_storage):
    build(local_storage)
    with pytest.raises(ExactlyOnceError, match="published"):
        discard_wal(local_storage, 6)


_FUZZ_TARGETS = ["wal", "epoch", "heartbeat", "identity", "offsets", "commits", "sources"]


#: Valid JSON lines with hostile values: deep nesting, integers beyond int64, lone surrogates,
#: NaN/Infinity, NUL (r06): each parser must refuse them with a named error or read them.
_HOSTILE = st.recursive(
    st.one_of(
        st.integers(-(2**70), 2**70),
        st.floats(),
        st.booleans(),
        st.none(),
        st.text(alphabet=st.characters(codec=None, categories=("Ll", "Nd", "Cs", "Cc")), max_size=6),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["epoch", "batchId", "path", "size", "kind", "x"]), inner, max_size=4)
    ),
    max_leaves=10,
)
_HOSTILE_LINES = st.tuples(st.lists(_HOSTILE, min_size=1, max_size=3), st.sampled_from([0, 0, 3000])).map(
    lambda t: ("v1\n" + "\n".join("[" * t[1] + json.dumps(v) + "]" * t[1] for v in t[0])).encode()
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(st.binary(max_size=400), st.text(max_size=300).map(lambda t: ("v1\n" + t).encode()), _HOSTILE_LINES),
    which=st.sampled_from(_FUZZ_TARGETS),
)
def test_fuzz_every_parser_raises_only_library_errors(memory_storage, data, which):
    from streaming_exactly_once.commit.protocol.lease import read_lease_state
    from streaming_exactly_once.table.table_logs import TableLogs

    s = memory_storage.child(f"f{abs(hash((which, data))) % 10**9}")
    logs = TableLogs.open(s, interval=3)
    try:
        if which == "wal":
            CommitSequence.from_bytes(data, path="wal/0", batch_id=0)
        elif which in ("epoch", "heartbeat"):
            s.atomic_write(f"_seo/{'epochs' if which == 'epoch' else 'heartbeats'}/1", data)
            if which == "heartbeat":
                s.atomic_write("_seo/epochs/1", b"v1")
            read_lease_state(s)
        elif which == "identity":
            s.atomic_write("_seo/table", data)
            read_identity(s)
        else:
            log_ = {"offsets": logs.offsets, "commits": logs.commits, "sources": logs.sources}[which]
            s.atomic_write(log_.path(0), data)
            log_.read(0)
            log_.check_snapshot()
    except ExactlyOnceError:
        pass
