"""A lease clock several processes share, so a test moves time past a lease instead of sleeping.

A frozen writer's lease expires when its heartbeat is older than its timeout. Tests of takeovers
used to wait that out in real time (a 1.5 s lease, many times a test). ``SharedClock`` is wall
time plus an offset kept in a file: every process that installs the same file reads the same
time, and ``advance`` moves all of them at once - the frozen writer's last heartbeat is then as
old as if the test had slept.

Installing replaces the clock every ``Lease`` of this process reads by default
(``commit.protocol.lease._wall_clock``) until uninstalled; a lease given its own ``clock`` keeps it.
Only the liveness of a lease reads the clock: fencing is by epoch files, so no clock can let a
fenced writer publish. A child process installs the parent's clock from ``SEO_LEASE_CLOCK``
(``install_from_env``), which the library itself never reads.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..commit.protocol import lease

ENV_VAR = "SEO_LEASE_CLOCK"


class SharedClock:
    """Wall time plus the offset in seconds stored at ``path`` (none yet: 0)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def offset(self) -> float:
        try:
            return float(self.path.read_text(encoding="ascii") or 0)
        except FileNotFoundError:
            return 0.0

    def __call__(self) -> float:
        return time.time() + self.offset()

    def advance(self, seconds: float) -> None:
        """Move every process's clock forward (a replaced file: a reader never sees half of it)."""
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temp.write_text(repr(self.offset() + seconds), encoding="ascii")
        os.replace(temp, self.path)

    def environ(self) -> dict[str, str]:
        """What a child process needs in its environment to install this clock."""
        return {ENV_VAR: str(self.path)}

    @contextmanager
    def installed(self) -> Iterator[SharedClock]:
        """Leases of this process read this clock meanwhile."""
        previous = _install(self)
        try:
            yield self
        finally:
            _install(previous)


_lock = threading.Lock()


def _install(clock: Callable[[], float]) -> Callable[[], float]:
    with _lock:
        previous = lease._wall_clock
        setattr(lease, "_wall_clock", clock)  # noqa: B010 - the module's global, by name
        return previous


def install_from_env(environ: Mapping[str, str] | None = None) -> SharedClock | None:
    """In a child process of a test: install the clock ``SEO_LEASE_CLOCK`` names, for good."""
    path = (os.environ if environ is None else environ).get(ENV_VAR)
    if not path:
        return None
    clock = SharedClock(path)
    _install(clock)
    return clock
