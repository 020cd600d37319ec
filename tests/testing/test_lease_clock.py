"""The shared lease clock: moving it ages every heartbeat at once, and never unfences a writer."""

from __future__ import annotations

import time

import pytest

from streaming_exactly_once.commit.protocol.lease import Lease, read_lease_state
from streaming_exactly_once.errors import ConcurrentWriterError, WriterFencedError
from streaming_exactly_once.testing.lease_clock import ENV_VAR, SharedClock, install_from_env


def test_advancing_the_clock_expires_a_lease_without_waiting(memory_storage, lease_clock):
    holder = Lease(memory_storage, timeout_ms=60_000)
    holder.acquire()
    with pytest.raises(ConcurrentWriterError):
        Lease(memory_storage, timeout_ms=60_000).acquire()
    lease_clock.advance(61)
    state = read_lease_state(memory_storage)
    assert state is not None and not state.alive and state.reason.startswith("heartbeat expired (61."), state
    successor = Lease(memory_storage, timeout_ms=60_000)
    assert successor.acquire() == holder.epoch + 1
    # the holder's own clock is the shared one too, and it does not matter: fencing is by epochs
    with pytest.raises(WriterFencedError):
        holder.check_fence()
    holder.clock = lambda: 0.0  # a clock that says its heartbeat is fresh
    holder.beat()  # a fenced writer writes no heartbeat
    assert read_lease_state(memory_storage).epoch == successor.epoch
    with pytest.raises(WriterFencedError):
        holder.check_fence()


def test_a_lease_with_a_clock_of_its_own_keeps_it(memory_storage, lease_clock):
    own = Lease(memory_storage, timeout_ms=1_000, clock=lambda: 1000.0)
    own.acquire()
    lease_clock.advance(3600)
    assert read_lease_state(memory_storage, now_ms=1_000_500).alive  # written at 1000 s by its clock
    assert own._now() == 1_000_000


def test_a_child_process_installs_the_clock_its_parent_moves(tmp_path, monkeypatch):
    from streaming_exactly_once.commit.protocol import lease

    monkeypatch.setattr(lease, "_wall_clock", lease._wall_clock)  # restored after the test
    parent = SharedClock(tmp_path / "offset")
    assert parent.offset() == 0.0
    parent.advance(2.5)
    child = install_from_env({ENV_VAR: str(tmp_path / "offset")})  # what a writer process does first
    assert child is not None and lease._wall_clock is child and child.offset() == 2.5
    parent.advance(1.5)
    assert child.offset() == 4.0 and abs(child() - (time.time() + 4.0)) < 1.0
    assert install_from_env({}) is None and lease._wall_clock is child  # no variable: nothing changes
