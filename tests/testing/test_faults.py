"""The fault-injecting storage itself: rules, counting, children, pickling, the sink's hook."""

from __future__ import annotations

import pickle

import pytest

from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.testing.faults import (
    BOUNDARIES,
    BOUNDARY_RULES,
    FaultInjectingStorage,
    InjectedFailure,
    call_at,
    from_env,
    parse_spec,
    with_faults,
)


def test_every_boundary_is_a_rule_and_specs_parse():
    assert set(BOUNDARY_RULES) == set(BOUNDARIES)
    rule = parse_spec("after-manifest@3+5ms", "crash")
    assert (rule.label, rule.nth, rule.delay_ms) == ("after-manifest", 3, 5)
    with pytest.raises(ValueError, match="bad fault spec"):
        parse_spec("after-lunch", "fail")


def test_fails_at_the_nth_matching_call_after_it_happened(memory_storage):
    s = with_faults(memory_storage, fail_at="after-wal@2")
    s.put_if_absent("_seo/wal/0", b"a")
    s.put_if_absent("_seo/wal/0x", b"not a WAL entry")
    with pytest.raises(InjectedFailure, match="after-wal"):
        s.put_if_absent("_seo/wal/1", b"b")
    assert memory_storage.read_bytes("_seo/wal/1") == b"b"  # "after": the effect is there
    s.put_if_absent("_seo/wal/2", b"c")  # only the 2nd


def test_before_rules_stop_the_call(memory_storage):
    s = with_faults(memory_storage, fail_at="before-wal")
    with pytest.raises(InjectedFailure):
        s.put_if_absent("_seo/wal/0", b"a")
    assert not memory_storage.exists("_seo/wal/0")


def test_per_batch_rules_count_the_first_match_after_each_wal_entry(memory_storage):
    for i in range(4):
        memory_storage.put_if_absent(f"_seo/staging/a/data/{i}", b"x")
        memory_storage.put_if_absent(f"_seo/staging/b/data/{i}", b"x")
    seen = []
    s = FaultInjectingStorage(memory_storage, [call_at("mid-move@2", lambda: seen.append(True))])
    s.put_if_absent("_seo/wal/0", b"")
    s.rename("_seo/staging/a/data/0", "0")
    s.rename("_seo/staging/a/data/1", "1")  # same batch: not counted
    assert not seen
    s.put_if_absent("_seo/wal/1", b"")
    s.rename("_seo/staging/b/data/0", "b0")
    assert seen == [True]


def test_children_share_the_rules_and_see_paths_from_the_root(memory_storage):
    s = with_faults(memory_storage, fail_at="mid-members")
    s.put_if_absent("_seo/wal/0", b"")
    s.child("orders").put_if_absent("_seo/offsets/0", b"")
    with pytest.raises(InjectedFailure):
        s.child("orders").put_if_absent("_seo/commits/0", b"")


def test_a_pickled_copy_is_the_plain_storage(memory_storage):
    s = with_faults(memory_storage, fail_at="after-wal")
    copy = pickle.loads(pickle.dumps(s))
    assert not isinstance(copy, FaultInjectingStorage)
    copy.put_if_absent("_seo/wal/0", b"")  # no fault on a worker


def test_from_env_wraps_only_when_asked(memory_storage):
    assert from_env(memory_storage, {}) is memory_storage
    wrapped = from_env(memory_storage, {"SEO_FAIL_AT": "after-commit"})
    assert isinstance(wrapped, FaultInjectingStorage) and wrapped.root_uri == memory_storage.root_uri


def test_the_sink_option_names_a_callable():
    pytest.importorskip("pyspark")
    from streaming_exactly_once.sink.batch_sink import wrap_storage
    from streaming_exactly_once.sink.options import SinkOptions
    from streaming_exactly_once.storage import open_storage

    with pytest.raises(ConfigError, match="module:callable"):
        SinkOptions.build({"storage_wrapper": "no colon"})
    storage = open_storage("memory://seo-wrap")
    assert wrap_storage(storage, "streaming_exactly_once.testing.faults:from_env") is storage
    with pytest.raises(ConfigError, match="cannot be imported"):
        wrap_storage(storage, "streaming_exactly_once.testing.faults:nothing")


_PAUSED_ON_A_THREAD = """
import os, socket, sys, threading
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import with_faults

storage = with_faults(open_storage(sys.argv[1]), pause_at="before-wal")
cpus = sorted(os.sched_getaffinity(0))

def commit():
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[-1]})  # this thread only
    storage.put_if_absent("_seo/wal/1", b"claim")  # paused before it

a, b = socket.socketpair()
os.sched_setaffinity(0, {cpus[0]})
os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # the main thread runs late
threading.Thread(target=commit).start()
b.recv(1)  # blocked, as PySpark's driver is in awaitTermination
"""


def test_a_pause_stops_the_thread_that_reached_it_at_once(tmp_path):
    """foreachBatch runs on py4j's callback thread, not the main one. A pause must stop that
    thread at its boundary: a process-wide SIGSTOP went to the main thread, and on a busy
    machine the writer's thread claimed its batch before the main thread stopped the rest (a
    zombie "frozen before its claim" that had claimed). The main thread is crowded here, as it
    is on a loaded machine."""
    import os
    import subprocess
    import sys
    import time

    from tests.torture.harness import process_state

    cpu0 = sorted(os.sched_getaffinity(0))[0]
    for trial in range(3):
        root = tmp_path / str(trial)
        hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu0}}})\nwhile True: pass"])
        child = subprocess.Popen([sys.executable, "-c", _PAUSED_ON_A_THREAD, str(root)], env={**os.environ, "PYTHONPATH": os.getcwd()})
        try:
            deadline = time.time() + 60
            while process_state(child.pid) != "T" and child.poll() is None and time.time() < deadline:
                time.sleep(0.01)
            assert process_state(child.pid) == "T", "the child never paused"
            hog.kill()
            time.sleep(0.3)
            assert not (root / "_seo" / "wal" / "1").exists(), f"trial {trial}: the paused thread went on past its boundary"
        finally:
            for p in (hog, child):
                p.kill()
                p.wait()
