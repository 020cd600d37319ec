"""#17: the lease is owned in one place - a committer closed and opened again writes under a new
epoch with a live heartbeat, never under the epoch it released."""

from __future__ import annotations

import time

import pytest

from streaming_exactly_once.commit.protocol.lease import read_lease_state
from streaming_exactly_once.errors import ConcurrentWriterError
from tests.commit.helpers import make_committer, stage_and_commit, visible_rows

Q = "44444444-4444-4444-4444-444444444444"


def rows_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 10))


def test_close_then_ensure_open_takes_a_new_epoch_with_a_heartbeat(local_storage):
    c = make_committer(local_storage, heartbeat=True, timeout_ms=3_000)
    stage_and_commit(c, Q, 0, rows_of(0))
    first = c.lease.epoch
    c.close()
    released = read_lease_state(local_storage)
    assert released is not None and (released.epoch, released.alive, released.reason) == (first, False, "released")

    stage_and_commit(c, Q, 1, rows_of(1))  # ensure_open() inside
    assert c.lease.epoch == first + 1
    state = read_lease_state(local_storage)
    assert state is not None and state.epoch == first + 1 and state.alive
    beat = state.heartbeat
    assert beat is not None and not beat.released
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the heartbeat thread keeps the new epoch alive
        later = read_lease_state(local_storage)
        if later is not None and later.heartbeat is not None and later.heartbeat.heartbeat_ms > beat.heartbeat_ms:
            break
        time.sleep(0.2)
    else:
        pytest.fail("no heartbeat under the new epoch")
    with pytest.raises(ConcurrentWriterError):
        make_committer(local_storage).ensure_open()  # the reopened writer holds the table
    assert visible_rows(local_storage) == rows_of(0) + rows_of(1)
    c.close()
    assert read_lease_state(local_storage).reason == "released"


def test_two_releases_at_once_write_the_released_heartbeat_once(tmp_path):
    """Under Spark Connect the SIGTERM handler releases on a thread of its own and then ends
    the process, while the query's end may be releasing on another thread: both wrote the
    released heartbeat, and the exit cut one write short, leaving its temp file (CI). A second
    release now waits for the first and writes nothing."""
    import threading

    from streaming_exactly_once.storage.local import LocalStorage

    writes: list[str] = []
    first_writing = threading.Event()

    class SlowHeartbeats(LocalStorage):
        def atomic_write(self, path: str, data: bytes) -> None:
            if path.startswith("_seo/heartbeats/") and b'"released":true' in data:
                writes.append(path)
                first_writing.set()
                time.sleep(0.3)  # the first release is mid-write when the second comes
            super().atomic_write(path, data)

    storage = SlowHeartbeats(str(tmp_path / "t"))
    c = make_committer(storage)
    c.open()
    epoch = c.lease.epoch
    first = threading.Thread(target=c.lease.release)
    first.start()
    assert first_writing.wait(10)
    c.lease.release()  # returns once the first is done, having written nothing
    first.join(10)
    assert writes == [f"_seo/heartbeats/{epoch}"]
    state = read_lease_state(storage)
    assert state is not None and state.epoch == epoch and state.reason == "released"
    assert [p.name for p in (tmp_path / "t" / "_seo" / "heartbeats").iterdir()] == [str(epoch)]


def test_a_release_that_waited_too_long_still_releases(tmp_path):
    """Red team: when the release under way cannot finish - it is the thread a SIGTERM
    interrupted, and the handler's release waits for it - the waiting release writes the
    released heartbeat itself after its bounded wait and gives the epoch up: the lease must
    not stay alive for a successor on another host, nor the writer go on under that epoch."""
    from streaming_exactly_once.storage.local import LocalStorage

    storage = LocalStorage(str(tmp_path / "t"))
    c = make_committer(storage)
    c.open()
    epoch = c.lease.epoch
    assert c.lease._releasing.acquire()  # a release under way that never finishes
    started = time.monotonic()
    c.lease.release()
    assert 1.5 < time.monotonic() - started < 10
    assert c.lease.epoch is None
    state = read_lease_state(storage)
    assert state is not None and state.epoch == epoch and state.reason == "released"


class _SlowBeats:
    """A local storage whose heartbeat writes (not the released one) take ``seconds``, as a
    throttled object store's retried PUT can."""

    def __init__(self, inner, seconds):
        self.inner, self.seconds, self.slow = inner, seconds, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def atomic_write(self, path, data):
        if self.slow and path.startswith("_seo/heartbeats/") and b'"released":false' in data:
            time.sleep(self.seconds)
        return self.inner.atomic_write(path, data)


@pytest.mark.slow
def test_a_heartbeat_slower_than_the_release_never_re_arms_the_lease(local_storage):
    from streaming_exactly_once.commit.protocol.lease import RELEASE_JOINS_HEARTBEAT_S, RELEASE_WAITS_FOR_BEAT_S, Lease

    storage = _SlowBeats(local_storage, 8.0)
    lease = Lease(storage, timeout_ms=1_500)  # a beat every 0.5 s
    lease.acquire()
    lease.start_heartbeat()
    storage.slow = True
    time.sleep(0.8)  # the heartbeat thread is inside a slow write now
    t0 = time.monotonic()
    lease.release()
    took = time.monotonic() - t0
    # bounded well under the 10 s a Spark Connect worker's SIGTERM handler gives it
    assert took < RELEASE_JOINS_HEARTBEAT_S + RELEASE_WAITS_FOR_BEAT_S + 1.0, took
    assert read_lease_state(local_storage).reason == "released"
    time.sleep(8.5)  # the slow write has landed meanwhile
    state = read_lease_state(local_storage)
    assert state is not None and not state.alive and state.reason == "released", state


def test_a_heartbeat_write_slower_than_the_release_never_re_arms_the_released_lease(local_storage):
    """A heartbeat's write can take longer than ``release`` waits for the heartbeat thread (an
    object store's PUT retried or throttled). When it lands after the release, the lease must
    still read released: the next writer takes the table at once, not after the timeout."""
    import threading

    from streaming_exactly_once.commit.protocol.lease import Lease
    from streaming_exactly_once.testing.faults import FaultInjectingStorage, Rule, Where

    storage = FaultInjectingStorage(local_storage)
    lease = Lease(storage, timeout_ms=10_000)  # a heartbeat every 3.3 s; a late one still looks alive
    lease.acquire()
    in_write = threading.Event()

    def slow_beat() -> None:
        if threading.current_thread().name == "seo-lease-heartbeat" and not in_write.is_set():
            in_write.set()
            time.sleep(6)  # longer than release's wait for the heartbeat thread

    storage.arm([Rule(Where(("atomic_write",), r"^_seo/heartbeats/", "before"), "call", callback=slow_beat)])
    lease.start_heartbeat()
    assert in_write.wait(10), "the heartbeat thread never wrote"
    lease.release()
    time.sleep(1.5)  # the slow write has landed by now
    state = read_lease_state(local_storage)
    assert state is not None and not state.alive and state.reason == "released", state
    make_committer(local_storage, timeout_ms=60_000).open()  # not ConcurrentWriterError
