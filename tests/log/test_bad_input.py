"""Bad log files give a named error that says which file, which batch and what to do.

Never a silent skip, never a raw JSONDecodeError/KeyError/UnicodeDecodeError.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from streaming_exactly_once.checkpoint import SparkCheckpoint
from streaming_exactly_once.errors import (
    ExactlyOnceError,
    LogCorruptError,
    MissingBatchError,
    UnsupportedLogVersionError,
)
from streaming_exactly_once.manifest.manifest_log import ManifestLog

GOOD_ENTRY = (
    b'{"path":"file:///t/part-0.parquet","size":10,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":33554432,"action":"add"}'
)

CASES = {
    "empty": (b"", LogCorruptError, "empty"),
    "truncated": (b"v1\n" + GOOD_ENTRY[:40], LogCorruptError, "truncated"),
    "garbage": (b"\x00\xff\xfe garbage", LogCorruptError, "UTF-8"),
    "garbage_text": (b"hello world\nmore", LogCorruptError, "version header"),
    "missing_header": (GOOD_ENTRY, LogCorruptError, "version header"),
    "newer_version": (b"v2\n" + GOOD_ENTRY, UnsupportedLogVersionError, "upgrade"),
    "blank_line": (b"v1\n\n" + GOOD_ENTRY, LogCorruptError, "blank"),
    "missing_field": (b'v1\n{"path":"file:///t/x","size":1}', LogCorruptError, "isDir"),
    "wrong_type": (GOOD_ENTRY.replace(b'"size":10', b'"size":"10"').join([b"v1\n", b""]), LogCorruptError, "size"),
    "not_an_object": (b"v1\n[1,2]", LogCorruptError, "not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("file_name", ["0", "2.compact"])
def test_manifest_file_problems(memory_storage, case, file_name):
    data, error, words = CASES[case]
    log = ManifestLog(memory_storage, default_interval=3)
    if file_name == "2.compact":
        good = b"v1\n" + GOOD_ENTRY
        memory_storage.put_if_absent("_spark_metadata/0", good)
        memory_storage.put_if_absent("_spark_metadata/1", good)
    memory_storage.put_if_absent(f"_spark_metadata/{file_name}", data)
    with pytest.raises(error) as err:
        log.files()
    message = str(err.value)
    assert words in message
    assert f"_spark_metadata/{file_name}" in message
    batch = int(file_name.split(".")[0])
    assert f"batch {batch}" in message
    assert err.value.batch_id == batch
    if error is LogCorruptError:
        assert "seo verify" in message or "backup" in message  # says what to do


@pytest.mark.parametrize("case", ["empty", "truncated", "garbage_text", "newer_version"])
def test_start_up_check_of_a_bad_compact_file_names_it(layer_storage, case):
    """``check_snapshot`` reads a compact file's ends only (``read_head``/``read_tail``); an empty
    object once made that a raw ``OSError`` on S3 (a range of an empty object is refused). The
    ends of an empty file on every backend are the storage contract's (``TestPartialReads``)."""
    data, error, words = CASES[case]
    good = b"v1\n" + GOOD_ENTRY
    layer_storage.put_if_absent("_spark_metadata/0", good)
    layer_storage.put_if_absent("_spark_metadata/1", good)
    layer_storage.put_if_absent("_spark_metadata/2.compact", data)
    with pytest.raises(error) as err:
        ManifestLog(layer_storage, default_interval=3).check_snapshot()
    assert words in str(err.value)
    assert "_spark_metadata/2.compact" in str(err.value)
    assert err.value.batch_id == 2


def test_trailing_newline_is_tolerated_like_spark(memory_storage):
    memory_storage.put_if_absent("_spark_metadata/0", b"v1\n" + GOOD_ENTRY + b"\n")
    assert len(ManifestLog(memory_storage).files()) == 1


def test_missing_batch_in_range(memory_storage):
    for i in (0, 1, 3):
        memory_storage.put_if_absent(f"_spark_metadata/{i}", b"v1\n" + GOOD_ENTRY)
    with pytest.raises(MissingBatchError) as err:
        ManifestLog(memory_storage).files()
    assert err.value.missing == [2]
    assert "_spark_metadata" in str(err.value)


def test_missing_compact_file(memory_storage):
    # 2.compact gone while a reader needs it for as_of=4 (5.compact and 8.compact fix k = 3)
    for name in ("2.compact", "3", "4", "5.compact", "6", "7", "8.compact"):
        memory_storage.put_if_absent(f"_spark_metadata/{name}", b"v1\n" + GOOD_ENTRY)
    memory_storage.delete("_spark_metadata/2.compact")
    with pytest.raises(MissingBatchError) as err:
        ManifestLog(memory_storage, default_interval=3).files(as_of=4)
    assert err.value.missing == [2]


CHECKPOINT_FILES = {
    "metadata": "metadata",
    "offsets": "offsets/0",
    "commits": "commits/0",
    "sources": "sources/0/0",
}


@pytest.mark.parametrize("kind", sorted(CHECKPOINT_FILES))
@pytest.mark.parametrize("case", ["empty", "garbage", "newer_version", "truncated"])
def test_checkpoint_file_problems(memory_storage, kind, case):
    path = CHECKPOINT_FILES[kind]
    data = {
        "empty": b"",
        "garbage": b"\xff\xfe\x00 nonsense",
        "newer_version": b"v9\n{}",
        "truncated": b'v1\n{"path":"file:///in/a.csv","timest',
    }[case]
    if kind == "metadata" and case == "newer_version":
        data = b"v9"
    memory_storage.put_if_absent(path, data)
    if kind == "sources":
        memory_storage.put_if_absent("offsets/0", b'v1\n{"batchWatermarkMs":0}\n{"logOffset":0}')
    ckpt = SparkCheckpoint(memory_storage)
    call = {
        "metadata": ckpt.query_id,
        "offsets": lambda: ckpt.offsets(0),
        "commits": lambda: ckpt.commit(0),
        "sources": lambda: ckpt.input_files(0),
    }[kind]
    if kind == "commits" and case == "truncated":
        with pytest.raises(LogCorruptError):
            call()
        return
    with pytest.raises((LogCorruptError, UnsupportedLogVersionError)) as err:
        call()
    assert path in str(err.value)


PARSERS = ["manifest", "offsets", "commits", "sources", "metadata"]


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(data=st.one_of(st.binary(max_size=300), st.text(max_size=200).map(lambda t: ("v1\n" + t).encode())), which=st.sampled_from(PARSERS))
def test_fuzz_parsers_raise_only_library_errors(memory_storage, data, which):
    memory_storage.delete_tree("f") if memory_storage.exists("f") else None
    st_ = memory_storage.child("f")
    ckpt = SparkCheckpoint(st_)
    try:
        if which == "manifest":
            st_.atomic_write("_spark_metadata/0", data)
            ManifestLog(st_).files()
        elif which == "offsets":
            st_.atomic_write("offsets/0", data)
            ckpt.offsets(0)
        elif which == "commits":
            st_.atomic_write("commits/0", data)
            ckpt.commit(0)
        elif which == "sources":
            st_.atomic_write("offsets/0", b'v1\n{}\n{"logOffset":0}')
            st_.atomic_write("sources/0/0", data)
            ckpt.input_files(0)
        else:
            st_.atomic_write("metadata", data)
            ckpt.query_id()
    except ExactlyOnceError:
        pass


# --- valid JSON that no log can hold (r06) ------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000
ENTRY = '{"path":"%s","size":%s,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":1,"action":"add"}'
ADVERSARIAL = {
    "deeply nested value": ('{"x":' + DEEP + "}", "nests deeper"),
    "size beyond int64": (ENTRY % ("file:///t/p=a/x.parquet", "1" + "0" * 30), "64-bit"),
    "int64 min minus one": (ENTRY % ("file:///t/p=a/x.parquet", str(-(2**63) - 1)), "64-bit"),
    "negative size": (ENTRY % ("file:///t/p=a/x.parquet", "-5"), "negative"),
    "NUL in path": (ENTRY % ("file:///t/p=a/x\\u0000.parquet", "5"), "NUL"),
    "lone surrogate in path": (ENTRY % ("file:///t/p=a/x\\ud800.parquet", "5"), "surrogate"),
    "bad percent escape": (ENTRY % ("file:///t/p=a/x%ZZ.parquet", "5"), "not a valid URI"),
    "escape that is not UTF-8": (ENTRY % ("file:///t/p=a/x%C3.parquet", "5"), "not UTF-8"),
    "NaN": (ENTRY % ("file:///t/p=a/x.parquet", "NaN"), "NaN"),
    "float overflow": ('{"x":1e400}', "double"),
    "huge integer literal": ('{"x":' + "9" * 5000 + "}", "line 2"),
    "two records on one line": (ENTRY % ("file:///t/a", "1") + " " + ENTRY % ("file:///t/b", "1"), "line 2"),
}


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_valid_json_no_log_can_hold_is_a_named_error(memory_storage, case):
    """Every reader path - Arrow's fast parser and the strict one - refuses the same lines, with
    file, batch and line, instead of RecursionError, OverflowError or UnicodeEncodeError."""
    from streaming_exactly_once import read

    line, words = ADVERSARIAL[case]
    memory_storage.put_if_absent("_spark_metadata/0", b"v1\n" + ENTRY.encode() % (b"file:///t/p=a/ok.parquet", b"1"))
    memory_storage.put_if_absent("_spark_metadata/1", b"v1\n" + line.encode("utf-8", "surrogatepass"))
    for call in (
        lambda: ManifestLog(memory_storage).files(),
        lambda: read.files(memory_storage.root_uri),
        lambda: read.arrow(memory_storage.root_uri),
    ):
        with pytest.raises(LogCorruptError) as err:
            call()
        message = str(err.value)
        assert "_spark_metadata/1 (batch 1)" in message and "line 2" in message and words in message, message


@pytest.mark.parametrize("kind", ["offsets", "commits", "sources", "wal", "identity", "epoch", "heartbeat"])
def test_deep_json_in_every_log_kind_is_a_named_error(memory_storage, kind):
    """r06b: the same deeply nested line in each of our log kinds."""
    from streaming_exactly_once.commit.protocol.lease import read_lease_state
    from streaming_exactly_once.commit.protocol.sequence import CommitSequence
    from streaming_exactly_once.table.identity import read_identity
    from streaming_exactly_once.table.table_logs import TableLogs

    data = b'v1\n{"x":' + DEEP.encode() + b"}"
    logs = TableLogs.open(memory_storage)
    with pytest.raises(LogCorruptError, match="nests deeper"):
        if kind == "wal":
            CommitSequence.from_bytes(data, path="_seo/wal/0", batch_id=0)
        elif kind == "identity":
            memory_storage.put_if_absent("_seo/table", data)
            read_identity(memory_storage)
        elif kind in ("epoch", "heartbeat"):
            writer = b'v1\n{"epoch":1,"writerId":"w","host":"h","pid":1,"startedMs":1}'
            memory_storage.put_if_absent("_seo/epochs/1", data if kind == "epoch" else writer)
            memory_storage.put_if_absent("_seo/heartbeats/1", data)
            read_lease_state(memory_storage)
        else:
            log = {"offsets": logs.offsets, "commits": logs.commits, "sources": logs.sources}[kind]
            memory_storage.put_if_absent(log.path(0), data)
            log.read(0)


_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, categories=("Ll", "Nd", "Cs", "Cc", "Po")), max_size=8),
)
_JSON = st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=12)
_PATHS = st.text(alphabet=st.characters(codec=None, categories=("Ll", "Nd", "Cs", "Cc", "Po", "Sm")), max_size=12).map(lambda t: "file:///t/" + t)


def _entry_line(path, size, extra, depth):
    obj = {"path": path, "size": size, "isDir": False, "modificationTime": 1, "blockReplication": 1, "blockSize": 1, "action": "add", "x": extra}
    text = json.dumps(obj, ensure_ascii=True)  # writes lone surrogates as \ud800 escapes
    return text.replace('"x":', '"x":' + "[" * depth, 1).replace("}", "]" * depth + "}", 1) if depth else text


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    lines=st.lists(
        st.tuples(_PATHS, st.one_of(st.integers(), st.integers(-(2**70), 2**70)), _JSON, st.sampled_from([0, 0, 70, 5000])),
        min_size=1,
        max_size=3,
    )
)
def test_fuzz_adversarial_manifest_lines_raise_only_library_errors(memory_storage, lines):
    """Valid-JSON manifest lines with hostile values: the readers say "corrupt" or read them,
    never let a foreign exception out."""
    from streaming_exactly_once import read

    body = "\n".join(_entry_line(*line) for line in lines)
    st_ = memory_storage.child(f"f{abs(hash(body)) % 10**9}")
    st_.atomic_write("_spark_metadata/0", ("v1\n" + body).encode("utf-8", "surrogatepass"))
    for call in (lambda: read.files(st_.root_uri, verify=True), lambda: read.files(st_.root_uri, allow_outside_root=True)):
        try:
            call()
        except ExactlyOnceError:
            pass
