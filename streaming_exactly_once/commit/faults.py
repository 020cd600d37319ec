"""Crash and failure injection at named commit boundaries, for the torture suite and tests.

A boundary is a point between two effects of the commit protocol::

    before-stage  after-stage  after-intent  before-wal  after-wal  mid-move  after-move
    after-manifest  after-delta  after-sources  after-commit  after-cleanup  after-wal-delete
    mid-members  after-members          (dataset groups: between and after the tables' publishes)

``after-manifest`` is also the instant before a ``format="delta"`` table's Delta commit
(``commit.delta_step``), ``after-delta`` the one after it.

``crash_at`` kills this very process with SIGKILL there (no cleanup, no finally blocks: what a
power cut or an OOM kill does); ``fail_at`` raises ``InjectedFailure`` (what an exception from
storage would do); ``pause_at`` stops the process with SIGSTOP (a writer frozen by a long GC
pause or a suspended VM, which a test then resumes with SIGCONT).

The spec is ``<boundary>[@<n>][+<ms>ms]``: at the n-th time the boundary is
reached in this process (default 1st), optionally ``ms`` milliseconds *after* it while the
process carries on (to hit the instants just after the manifest entry appears).
Parsed from the ``SEO_CRASH_AT``/``SEO_FAIL_AT``/``SEO_PAUSE_AT`` environment variables by the
sink (an edge).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

BOUNDARIES = (
    "before-stage",
    "after-stage",
    "after-intent",
    "before-wal",
    "after-wal",
    "mid-move",
    "after-move",
    "after-manifest",
    "after-delta",
    "after-sources",
    "after-commit",
    "after-cleanup",
    "after-wal-delete",
    "mid-members",
    "after-members",
)
#: Boundaries only a dataset group's commit reaches, and those only a single table's reaches.
GROUP_ONLY = ("mid-members", "after-members")
TABLE_ONLY = ("after-manifest",)
#: Boundaries only a commit with a Delta step reaches (``format="delta"``).
DELTA_ONLY = ("after-delta",)

_SPEC = re.compile(r"^(?P<name>[a-z-]+)(?:@(?P<nth>\d+))?(?:\+(?P<ms>\d+)ms)?$")


class InjectedFailure(RuntimeError):
    """Raised at a ``fail_at`` boundary (a test double for a storage error)."""


@dataclass(frozen=True)
class FaultSpec:
    boundary: str
    nth: int = 1
    delay_ms: int = 0

    @classmethod
    def parse(cls, text: str | None) -> FaultSpec | None:
        if not text:
            return None
        match = _SPEC.match(text.strip())
        if match is None or match.group("name") not in BOUNDARIES:
            raise ValueError(f"bad fault spec {text!r}: use <boundary>[@n][+Nms], boundary one of {', '.join(BOUNDARIES)}")
        return cls(match.group("name"), int(match.group("nth") or 1), int(match.group("ms") or 0))


class FaultHooks:
    def __init__(
        self, crash_at: FaultSpec | None = None, fail_at: FaultSpec | None = None, pause_at: FaultSpec | None = None
    ) -> None:
        self.crash_at = crash_at
        self.fail_at = fail_at
        self.pause_at = pause_at
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> FaultHooks:
        return cls(
            FaultSpec.parse(environ.get("SEO_CRASH_AT")),
            FaultSpec.parse(environ.get("SEO_FAIL_AT")),
            FaultSpec.parse(environ.get("SEO_PAUSE_AT")),
        )

    def __call__(self, boundary: str) -> None:
        with self._lock:
            self._seen[boundary] += 1
            count = self._seen[boundary]
        crash = self.crash_at
        if crash is not None and crash.boundary == boundary and crash.nth == count:
            if crash.delay_ms:
                threading.Timer(crash.delay_ms / 1000, _kill_self).start()
            else:
                _kill_self()
        pause = self.pause_at
        if pause is not None and pause.boundary == boundary and pause.nth == count:
            os.kill(os.getpid(), signal.SIGSTOP)  # resumes here on SIGCONT
        fail = self.fail_at
        if fail is not None and fail.boundary == boundary and fail.nth == count:
            raise InjectedFailure(f"injected failure at {boundary} (occurrence {count})")


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


NO_FAULTS = FaultHooks()
