"""Fault injection off the data path: a storage wrapper that crashes, fails or pauses the process
at a storage call, the way Spark's ``FailureInjectionCheckpointFileManager`` does.

``FaultInjectingStorage`` implements ``Storage`` by delegation and checks every call against
its ``Rule``s: a storage operation, a path pattern (relative to the wrapped root), ``before``
or ``after`` the call, and the n-th matching call. Nothing in the sink or the committer knows
about it: a sink gets it through its neutral ``storage_wrapper`` option (``from_env``), a
committer by being built on a wrapped storage. A pickled copy (a Spark task's share of the
work) is the plain inner storage: faults hit the process that built the wrapper, never a worker.

Actions: ``crash`` (SIGKILL of this process), ``fail`` (raises ``InjectedFailure``), ``pause``
(SIGSTOP, resumed by the test with SIGCONT), ``call`` (a test's function).

**Named boundaries** of the commit protocol (``after-wal``, ``after-manifest``, ``mid-iceberg``,
...) are one storage rule each (``BOUNDARY_RULES``); ``docs/design/fault-injection.md`` says
where each one is. The spec is ``<boundary>[@<n>][+<ms>ms]``: at the n-th time the boundary is
reached in this process (default 1st), optionally ``ms`` milliseconds *after* it while the
process carries on (crash only). ``from_env`` reads specs from
``SEO_CRASH_AT``/``SEO_FAIL_AT``/``SEO_PAUSE_AT``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from ..storage.base import ByteRange, ComposedFiles, FileInfo, Piece, PreparedFiles, Storage, composed_files, join, prepared_files

Action = Literal["crash", "fail", "pause", "call"]
When = Literal["before", "after"]

BOUNDARIES = (
    "before-stage",
    "after-stage",
    "after-rewrite",
    "after-intent",
    "before-wal",
    "after-wal",
    "mid-move",
    "after-move",
    "after-schema",
    "after-retired",
    "after-manifest",
    "after-delta",
    "before-iceberg",
    "before-iceberg-publish",
    "mid-iceberg",
    "after-iceberg",
    "after-sources",
    "after-commit",
    "after-cleanup",
    "after-records-sync",
    "after-wal-delete",
    "mid-members",
    "after-members",
)
#: Boundaries only a dataset group's commit reaches, and those only a single table's reaches.
GROUP_ONLY = ("mid-members", "after-members")
TABLE_ONLY = ("after-manifest",)
#: Boundaries only a commit with a Delta step reaches (``format="delta"``).
DELTA_ONLY = ("after-delta",)
#: Boundaries only a commit with an Iceberg step reaches (``format="iceberg"``, path-based).
ICEBERG_ONLY = ("before-iceberg", "before-iceberg-publish", "mid-iceberg", "after-iceberg")
#: Boundaries only a commit that creates or changes a table's schema reaches.
SCHEMA_ONLY = ("after-schema",)
#: Boundaries only a compaction batch that rewrites small files reaches (the ``compaction`` option; a
#: ``retention`` that drops entries reaches ``after-retired`` too).
COMPACTION_ONLY = ("after-rewrite", "after-retired")
#: Boundaries only a commit with one of those features (a table format, a schema change, a rewrite) reaches.
FEATURE_ONLY = (*DELTA_ONLY, *ICEBERG_ONLY, *SCHEMA_ONLY, *COMPACTION_ONLY)

#: What the sink option ``storage_wrapper`` names to install faults from the environment.
FROM_ENV = "streaming_exactly_once.testing.faults:from_env"
ENV_VARS: Mapping[Action, str] = {"crash": "SEO_CRASH_AT", "fail": "SEO_FAIL_AT", "pause": "SEO_PAUSE_AT"}

_CREATE = ("put_if_absent", "open_exclusive", "put_composed_if_absent", "publish_prepared")
_N = r"\d+(\.compact)?$"
#: a dataset group's table path before a table's own file (none for a single table; a group's
#: table directories never start with ``_``)
_TABLE = r"(?:[^_/][^/]*/)*"
_WAL = r"^_seo/wal/\d+$"


@dataclass(frozen=True)
class Where:
    """A storage call a boundary is at: operations, path pattern, before/after, once per batch."""

    ops: tuple[str, ...]
    path: str
    when: When
    per_batch: bool = False


BOUNDARY_RULES: Mapping[str, Where] = {
    "after-intent": Where(("makedirs",), r"^_seo/staging/[^/]+$", "before"),
    "before-stage": Where(("makedirs",), r"^_seo/staging/[^/]+$", "after"),
    "after-stage": Where(("put_if_absent",), _WAL, "before"),
    "before-wal": Where(("put_if_absent",), _WAL, "before"),
    "after-wal": Where(("put_if_absent",), _WAL, "after"),
    "after-rewrite": Where(("put_if_absent",), r"^_seo/staging/[^/]+/rewrite/", "after"),
    "mid-move": Where(("rename",), r"^_seo/staging/", "after", per_batch=True),
    "after-move": Where(("sync",), r"^(?!_seo/)", "after"),
    "after-schema": Where(_CREATE, r"(^|/)_seo/schema/\d+$", "after"),
    "after-retired": Where(_CREATE, r"(^|/)_seo/retired/\d+$", "after"),
    "after-manifest": Where(_CREATE, rf"^(_spark_metadata|_seo/manifest)/{_N}", "after"),
    "after-delta": Where(_CREATE, rf"^_seo/offsets/{_N}", "before"),
    "before-iceberg": Where(("atomic_write", *_CREATE), rf"^{_TABLE}metadata/[^/]+\.avro$", "before", per_batch=True),
    "before-iceberg-publish": Where(_CREATE, rf"^{_TABLE}metadata/v\d+\.metadata\.json$", "before"),
    "mid-iceberg": Where(_CREATE, rf"^{_TABLE}metadata/v\d+\.metadata\.json$", "after"),
    "after-iceberg": Where(_CREATE, rf"^_seo/offsets/{_N}", "before"),
    "after-sources": Where(_CREATE, rf"^_seo/sources/{_N}", "after"),
    "after-commit": Where(_CREATE, rf"^_seo/commits/{_N}", "after"),
    "after-cleanup": Where(("delete_tree",), r"^_seo/staging/[^/]+/intents$", "after"),
    "after-records-sync": Where(("sync",), r"^_seo/(offsets|sources|ledger)/\d+$", "after"),
    "after-wal-delete": Where(("delete",), _WAL, "after"),
    "mid-members": Where(_CREATE, rf"^.+/_seo/commits/{_N}", "after", per_batch=True),
    "after-members": Where(_CREATE, rf"^_seo/offsets/{_N}", "before"),
}
assert set(BOUNDARY_RULES) == set(BOUNDARIES)

_SPEC = re.compile(r"^(?P<name>[a-z-]+)(?:@(?P<nth>\d+))?(?:\+(?P<ms>\d+)ms)?$")


class InjectedFailure(RuntimeError):
    """Raised by a ``fail`` rule (a test double for a storage error)."""


@dataclass
class Rule:
    """Act at the ``nth`` storage call matching ``where`` (counted in this process)."""

    where: Where
    action: Action
    nth: int = 1
    delay_ms: int = 0
    label: str = ""
    callback: Callable[[], None] | None = None  # the ``call`` action's (a test's own interleaving)
    count: int = field(default=0, compare=False)
    batches: set[str] = field(default_factory=set, compare=False)

    def __post_init__(self) -> None:
        self._path = re.compile(self.where.path)

    def matches(self, op: str, path: str, when: When) -> bool:
        return op in self.where.ops and when == self.where.when and self._path.search(path) is not None


def parse_spec(text: str, action: Action) -> Rule:
    """A rule from ``<boundary>[@n][+Nms]``."""
    match = _SPEC.match(text.strip())
    if match is None or match.group("name") not in BOUNDARY_RULES:
        raise ValueError(f"bad fault spec {text!r}: use <boundary>[@n][+Nms], boundary one of {', '.join(BOUNDARIES)}")
    name = match.group("name")
    return Rule(BOUNDARY_RULES[name], action, int(match.group("nth") or 1), int(match.group("ms") or 0), label=name)


def call_at(boundary: str, callback: Callable[[], None]) -> Rule:
    """A rule that calls ``callback`` at ``boundary`` (spec syntax, without a delay)."""
    rule = parse_spec(boundary, "call")
    rule.callback = callback
    return rule


def rules(*, crash_at: str | None = None, fail_at: str | None = None, pause_at: str | None = None) -> list[Rule]:
    """Rules from boundary specs (None or empty: none)."""
    specs: list[tuple[str | None, Action]] = [(crash_at, "crash"), (fail_at, "fail"), (pause_at, "pause")]
    return [parse_spec(spec, action) for spec, action in specs if spec]


class _State:
    """What a wrapper and its children share: the rules and the batch being committed."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.lock = threading.Lock()
        self.rules = list(rules)
        self.batch = ""  # the last WAL entry created or read: "a batch" of per-batch rules


def _unwrapped(storage: Storage) -> Storage:
    return storage


class FaultInjectingStorage(Storage):
    """``inner`` with ``rules`` applied to its calls; see the module docstring."""

    def __init__(self, inner: Storage, rules: Sequence[Rule] = (), *, _state: _State | None = None, _prefix: str = "") -> None:
        self.inner = inner
        self.root_uri = inner.root_uri
        self.rename_is_atomic = inner.rename_is_atomic
        self.usable_on_executors = inner.usable_on_executors
        self.supports_prepared_files = inner.supports_prepared_files
        self.supports_composed_files = inner.supports_composed_files
        self._state = _state or _State(rules)
        self._prefix = _prefix

    def arm(self, rules: Sequence[Rule]) -> None:
        """Replace the rules (counted from now) of this wrapper and its children."""
        with self._state.lock:
            self._state.rules = list(rules)

    def __reduce__(self) -> tuple[Any, ...]:
        return _unwrapped, (self.inner,)

    # -- the injection -------------------------------------------------------------------------

    def _at(self, op: str, path: str, when: When) -> None:
        full = join(self._prefix, path)
        state = self._state
        hits: list[tuple[Rule, int]] = []
        with state.lock:
            if when == "before" and op in ("put_if_absent", "read_bytes") and re.search(_WAL, full):
                state.batch = full
            for rule in state.rules:
                if not rule.matches(op, full, when):
                    continue
                if rule.where.per_batch:
                    if state.batch in rule.batches:
                        continue
                    rule.batches.add(state.batch)
                rule.count += 1
                if rule.count == rule.nth:
                    hits.append((rule, rule.count))
        for rule, count in hits:
            _act(rule, count)

    @contextlib.contextmanager
    def _around(self, op: str, path: str) -> Iterator[None]:
        self._at(op, path, "before")
        yield
        self._at(op, path, "after")

    # -- identity --------------------------------------------------------------------------------

    def uri(self, path: str = "") -> str:
        return self.inner.uri(path)

    def child(self, path: str) -> Storage:
        return FaultInjectingStorage(self.inner.child(path), _state=self._state, _prefix=join(self._prefix, path))

    def without_sync(self) -> Storage:
        """The same rules over the inner storage's writes without their sync."""
        inner = self.inner.without_sync()
        return self if inner is self.inner else FaultInjectingStorage(inner, _state=self._state, _prefix=self._prefix)

    # -- reads -------------------------------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        with self._around("read_bytes", path):
            return self.inner.read_bytes(path)

    def info(self, path: str) -> FileInfo:
        with self._around("info", path):
            return self.inner.info(path)

    def read_head(self, path: str, n: int) -> bytes:
        with self._around("read_head", path):
            return self.inner.read_head(path, n)

    def read_tail(self, path: str, n: int) -> bytes:
        with self._around("read_tail", path):
            return self.inner.read_tail(path, n)

    def read_tail_synced(self, path: str, n: int) -> bytes:
        with self._around("read_tail", path):
            return self.inner.read_tail_synced(path, n)

    def exists(self, path: str) -> bool:
        with self._around("exists", path):
            return self.inner.exists(path)

    def list_dir(self, path: str = "") -> list[FileInfo]:
        with self._around("list_dir", path):
            return self.inner.list_dir(path)

    def walk_files(self, path: str = "") -> Iterator[FileInfo]:
        with self._around("walk_files", path):
            return iter(list(self.inner.walk_files(path)))

    def hidden_files(self, path: str = "", *, recursive: bool = True) -> Iterator[FileInfo]:
        with self._around("walk_files", path):
            return iter(list(self.inner.hidden_files(path, recursive=recursive)))

    # -- writes ------------------------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> None:
        with self._around("put_if_absent", path):
            self.inner.put_if_absent(path, data)

    def atomic_write(self, path: str, data: bytes) -> None:
        with self._around("atomic_write", path):
            self.inner.atomic_write(path, data)

    @contextlib.contextmanager
    def _exclusive(self, path: str) -> Iterator[IO[bytes]]:
        self._at("open_exclusive", path, "before")
        with self.inner.open_exclusive(path) as handle:
            yield handle
        self._at("open_exclusive", path, "after")

    def open_exclusive(self, path: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        return self._exclusive(path)

    def open_write(self, path: str) -> IO[bytes]:
        with self._around("open_write", path):
            return self.inner.open_write(path)

    def rename(self, src: str, dst: str) -> None:
        with self._around("rename", src):
            self.inner.rename(src, dst)

    def sync(self, paths: Sequence[str], *, contents: bool = True) -> None:
        with self._around("sync", paths[0] if paths else ""):
            self.inner.sync(paths, contents=contents)

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        with self._around("delete", path):
            self.inner.delete(path, missing_ok=missing_ok)

    def delete_tree(self, path: str) -> None:
        with self._around("delete_tree", path):
            self.inner.delete_tree(path)

    def makedirs(self, path: str) -> None:
        with self._around("makedirs", path):
            self.inner.makedirs(path)

    def check_exclusive_create(self, probe_dir: str) -> None:
        self.inner.check_exclusive_create(probe_dir)

    # ComposedFiles and PreparedFiles (storage.base): offered exactly when the wrapped storage does

    def _composed(self) -> ComposedFiles:
        store = composed_files(self.inner)
        if store is None:
            raise NotImplementedError(f"{type(self.inner).__name__} has no composed files")
        return store

    def put_composed_if_absent(self, path: str, pieces: Sequence[Piece]) -> None:
        with self._around("put_composed_if_absent", path):
            self._composed().put_composed_if_absent(path, pieces)

    def _prepared(self) -> PreparedFiles:
        store = prepared_files(self.inner)
        if store is None:
            raise NotImplementedError(f"{type(self.inner).__name__} has no prepared files")
        return store

    def open_prepared(self, path: str, *, append: bool) -> IO[bytes]:
        return self._prepared().open_prepared(path, append=append)

    def sync_prepared(self, path: str) -> None:
        self._prepared().sync_prepared(path)

    def publish_prepared(self, path: str, final: str) -> None:
        with self._around("publish_prepared", final):
            self._prepared().publish_prepared(path, final)

    def append_range_prepared(self, path: str, source: ByteRange) -> None:
        self._prepared().append_range_prepared(path, source)

    # -- hand-off ----------------------------------------------------------------------------------

    def filesystem(self) -> tuple[Any, str]:
        return self.inner.filesystem()

    def options(self) -> dict[str, Any]:
        return self.inner.options()

    def __repr__(self) -> str:
        return f"FaultInjectingStorage({self.inner!r})"


def _act(rule: Rule, count: int) -> None:
    if rule.action == "crash":
        if rule.delay_ms:
            threading.Timer(rule.delay_ms / 1000, _kill_self).start()
        else:
            _kill_self()
    elif rule.action == "pause":
        # at the calling thread: it stops before its next instruction (a process-directed
        # SIGSTOP goes to the main thread, and a writer on another thread - foreachBatch runs on
        # py4j's callback thread - ran on past its boundary until that one stopped the rest)
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)  # resumes here on SIGCONT
    elif rule.action == "call":
        if rule.callback is not None:
            rule.callback()
    else:
        raise InjectedFailure(f"injected failure at {rule.label or rule.where.path} (occurrence {count})")


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def with_faults(storage: Storage, *, crash_at: str | None = None, fail_at: str | None = None, pause_at: str | None = None) -> FaultInjectingStorage:
    """``storage`` wrapped with the rules of these boundary specs."""
    return FaultInjectingStorage(storage, rules(crash_at=crash_at, fail_at=fail_at, pause_at=pause_at))


def from_env(storage: Storage, environ: Mapping[str, str] | None = None) -> Storage:
    """The sink's ``storage_wrapper`` (``FROM_ENV``): ``storage`` with the rules of
    ``SEO_CRASH_AT``/``SEO_FAIL_AT``/``SEO_PAUSE_AT`` of this process, or as it is without them."""
    env = os.environ if environ is None else environ
    specs = {action: env.get(var) for action, var in ENV_VARS.items()}
    if not any(specs.values()):
        return storage
    return with_faults(storage, crash_at=specs["crash"], fail_at=specs["fail"], pause_at=specs["pause"])
