"""Single-writer lease: epochs as fencing tokens, per-epoch heartbeats for liveness.

Bytes::

    _seo/epochs/4        v1
                         {"epoch":4,"writerId":"2f6c...","host":"vm","pid":4121,"pidStart":"86523","startedMs":1795313165250,"description":"events-ingest","bootId":"8d0e...","pidNamespace":"pid:[4026531836]","sparkApp":"local-1795313160001","queryId":"c578917c-..."}
    _seo/heartbeats/4    v1
                         {"epoch":4,"writerId":"2f6c...","heartbeatMs":1795313175250,"timeoutMs":60000,"released":false}

* **Fencing.** A writer owns the table from the moment it creates ``epochs/E`` (a
  create-if-absent write, so two writers can never hold the same epoch) until ``epochs/E+1``
  exists - or ``epochs/E`` itself is gone. Before claiming a batch and again right after
  claiming it (``commit.committer``) a writer checks both; a writer that finds itself fenced
  raises ``WriterFencedError`` and never publishes. Two ``exists`` calls, whatever the history.
* **Old epochs.** Only the newest ``KEEP_EPOCHS`` epochs are kept; older epoch files (with
  their heartbeat and recovery record) are deleted *in ascending order*. So whenever
  ``epochs/E+1`` is gone, ``epochs/E`` was deleted before it, and a writer frozen at epoch E
  through any number of takeovers still finds itself fenced when it wakes up.
* **Liveness.** Writer E rewrites only its own ``heartbeats/E`` (so a fenced writer cannot
  clobber its successor's record). A new writer may take over epoch E when E released the lease
  (clean stop), when E's process is gone, or when E's heartbeat is older than its timeout.
  Otherwise it fails fast with ``ConcurrentWriterError``. "Process gone" is trusted only when
  the other writer ran in the same process space as the caller - same host name, same kernel
  boot (``bootId``) and same pid namespace (``pidNamespace``): two containers on one node may
  share a host name and reuse pids, so a pid that is dead *here* says nothing there. Epoch files
  written before these two fields existed are judged by their heartbeat only. Clocks of
  different hosts must agree to well within the timeout.
* **A new run of the same query.** ``sparkApp`` and ``queryId`` (optional; a sink sets them)
  name the Spark application and streaming query the writer commits for. Spark runs at most one
  run of a query id at a time within an application, so a writer for the same query in the same
  application on the same host holds the lease of a run that has ended; its process may linger
  (under Spark Connect the server ends an ended query's worker late). The new run takes over at
  once instead of waiting; anything the old process still does is fenced like any zombie's.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field as dc_field
from typing import Any, TypeVar

from ...errors import ConcurrentWriterError, WriterFencedError
from ...log.batch_log import parse_batch_file_name
from ...log.record_fields import decode, encode, json_field
from ...log.record_file import encode_record, read_record
from ...storage.base import Storage
from ...table.layout import EPOCH_SIDE_DIRS, EPOCHS_DIR, HEARTBEATS_DIR

log = logging.getLogger("streaming_exactly_once.lease")

VERSION = 1
KEEP_EPOCHS = 16
#: How long ``release`` waits for the heartbeat thread to stop, then for a heartbeat write in
#: flight, before it writes "released" anyway: together well under the 10 s a Spark Connect
#: worker's SIGTERM handler gives the release (``sink.query_watch``).
RELEASE_JOINS_HEARTBEAT_S = 2.0
RELEASE_WAITS_FOR_BEAT_S = 3.0
#: How long a maintenance command waits for a live writer to let go before it refuses
#: (``wait_for_release``): a sink releases its table when Spark's listener bus tells it that its
#: query ended, which may come a moment after ``awaitTermination`` returned to the user.
ENDING_WRITER_WAIT_S = 5.0
HINT = (
    "Lease files only say who writes the table. If you are sure no writer is running, delete "
    "this file and start again; the next writer takes a new epoch."
)


@dataclass(frozen=True)
class WriterInfo:
    epoch: int = dc_field(metadata=json_field("epoch", int))
    writer_id: str = dc_field(metadata=json_field("writerId", str))
    host: str = dc_field(metadata=json_field("host", str))
    pid: int = dc_field(metadata=json_field("pid", int))
    pid_start: str | None = dc_field(metadata=json_field("pidStart", str, optional=True))
    started_ms: int = dc_field(metadata=json_field("startedMs", int))
    description: str = dc_field(default="", metadata=json_field("description", str, optional=True))
    boot_id: str | None = dc_field(default=None, metadata=json_field("bootId", str, optional=True))
    pid_namespace: str | None = dc_field(default=None, metadata=json_field("pidNamespace", str, optional=True))
    spark_app: str | None = dc_field(default=None, metadata=json_field("sparkApp", str, optional=True))
    query_id: str | None = dc_field(default=None, metadata=json_field("queryId", str, optional=True))

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> WriterInfo:
        return decode(cls, obj)

    def same_process_space(self, other: ProcessSpace) -> bool:
        """Whether this writer's pid means the same process as in ``other`` (see module docstring)."""
        return (
            self.host == other.host
            and self.boot_id is not None
            and self.pid_namespace is not None
            and (self.boot_id, self.pid_namespace) == (other.boot_id, other.pid_namespace)
        )


@dataclass(frozen=True)
class Heartbeat:
    epoch: int = dc_field(metadata=json_field("epoch", int))
    writer_id: str = dc_field(metadata=json_field("writerId", str))
    heartbeat_ms: int = dc_field(metadata=json_field("heartbeatMs", int))
    timeout_ms: int = dc_field(metadata=json_field("timeoutMs", int))
    released: bool = dc_field(default=False, metadata=json_field("released", bool, optional=True))

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Heartbeat:
        return decode(cls, obj)


@dataclass(frozen=True)
class LeaseState:
    """What a reader (``seo status``, a would-be writer) sees of the current owner."""

    epoch: int
    writer: WriterInfo | None
    heartbeat: Heartbeat | None
    alive: bool
    reason: str


@dataclass(frozen=True)
class ProcessSpace:
    """Where a pid is meaningful: host name, kernel boot and pid namespace of this process."""

    host: str
    boot_id: str | None
    pid_namespace: str | None

    @classmethod
    def current(cls) -> ProcessSpace:
        return cls(socket.gethostname(), _read_text("/proc/sys/kernel/random/boot_id"), _pid_namespace())


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def process_start_time(pid: int) -> str | None:
    """Linux: the start time of ``pid`` in clock ticks (guards against pid reuse)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except (OSError, IndexError):
        return None


def process_is_running(pid: int, start: str | None) -> bool:
    """Whether ``pid`` is a live (not zombie) process started at ``start``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        if state in (b"Z", b"X"):
            return False
    except OSError:
        pass
    if start is not None:
        current = process_start_time(pid)
        if current is not None and current != start:
            return False
    return True


def _wall_clock() -> float:
    """Seconds since the epoch, as every lease of this process reads them unless given a clock
    of its own: ``time.time``. A test that runs writers in several processes replaces it with
    one they share (``testing.lease_clock``) to move past a lease instead of sleeping through it."""
    return time.time()


R = TypeVar("R")


def _read(storage: Storage, path: str, from_json: Callable[[dict[str, Any]], R]) -> R | None:
    return read_record(storage, path, from_json, hint=HINT, version=VERSION)


def writer_still_running(storage: Storage, epoch: int) -> WriterInfo | None:
    """The writer of ``epoch`` if its process provably still runs (same process space, same pid
    and start time); None when it is gone or cannot be judged from here."""
    writer = _read(storage, f"{EPOCHS_DIR}/{epoch}", WriterInfo.from_json)
    if writer is None or not writer.same_process_space(ProcessSpace.current()):
        return None
    return writer if process_is_running(writer.pid, writer.pid_start) else None


def list_epochs(storage: Storage) -> list[int]:
    ids = []
    for entry in storage.list_dir(EPOCHS_DIR):
        parsed = parse_batch_file_name(entry.name)
        if parsed is not None and not parsed[1]:
            ids.append(parsed[0])
    return sorted(ids)


def read_lease_state(storage: Storage, *, now_ms: int | None = None, space: ProcessSpace | None = None) -> LeaseState | None:
    """The latest epoch's owner and whether it is still alive; None if no writer ever wrote."""
    epochs = list_epochs(storage)
    if not epochs:
        return None
    epoch = epochs[-1]
    writer = _read(storage, f"{EPOCHS_DIR}/{epoch}", WriterInfo.from_json)
    beat = _read(storage, f"{HEARTBEATS_DIR}/{epoch}", Heartbeat.from_json)
    now = int(_wall_clock() * 1000) if now_ms is None else now_ms
    space = ProcessSpace.current() if space is None else space
    if beat is not None and beat.released:
        return LeaseState(epoch, writer, beat, False, "released")
    if writer is not None and writer.same_process_space(space) and not process_is_running(writer.pid, writer.pid_start):
        return LeaseState(epoch, writer, beat, False, "process gone")
    last = beat.heartbeat_ms if beat is not None else (writer.started_ms if writer else 0)
    timeout = beat.timeout_ms if beat is not None else 60_000
    age = now - last
    if age > timeout:
        return LeaseState(epoch, writer, beat, False, f"heartbeat expired ({age / 1000:.1f}s old)")
    return LeaseState(epoch, writer, beat, True, f"heartbeat {age / 1000:.1f}s ago")


def wait_for_release(storage: Storage, seconds: float = ENDING_WRITER_WAIT_S) -> LeaseState | None:
    """The lease's state once no live writer holds it, or as it is after ``seconds``: what a
    maintenance command reads before it takes the table (``ENDING_WRITER_WAIT_S`` says why)."""
    deadline = time.monotonic() + seconds
    state = read_lease_state(storage)
    while state is not None and state.alive and time.monotonic() < deadline:
        time.sleep(0.2)
        state = read_lease_state(storage)
    return state


def epoch_fenced(storage: Storage, epoch: int) -> bool:
    """Whether writer ``epoch`` of the table at ``storage`` is fenced (module docstring)."""
    return storage.exists(f"{EPOCHS_DIR}/{epoch + 1}") or not storage.exists(f"{EPOCHS_DIR}/{epoch}")


def fenced_error(storage: Storage, epoch: int, what: str) -> WriterFencedError:
    return WriterFencedError(
        f"This writer (epoch {epoch}) lost table {storage.root_uri} to a newer writer "
        f"(epoch {epoch + 1} or later) and will not {what} anything. Its in-flight batch, if its WAL "
        "entry was written in time, is completed by the new writer. Restart this query only after "
        "stopping the other one.",
        table=storage.root_uri,
        epoch=epoch,
    )


def fenced_cause(storage: Storage, epoch: int | None, what: str) -> WriterFencedError | None:
    """For a write of writer ``epoch`` that failed with ``FileNotFoundError``: the
    ``WriterFencedError`` to raise from it if that writer is fenced, else None (raise the
    original). A fenced writer's write fails that way when the writer that took the table over
    removed its temp file as dead (``table.temp_files``): the real cause is
    the fencing, and it says so."""
    if epoch is not None and epoch_fenced(storage, epoch):
        return fenced_error(storage, epoch, what)
    return None


class Lease:
    """This process's claim on one table (see the module docstring)."""

    def __init__(
        self,
        storage: Storage,
        *,
        timeout_ms: int = 60_000,
        description: str = "",
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.storage = storage
        self.timeout_ms = timeout_ms
        self.description = description
        #: What this lease reads the time from (None: ``_wall_clock``). Only liveness reads it - a
        #: heartbeat's age; fencing is by epoch files, so no clock lets a fenced writer publish.
        self.clock = clock
        self.writer_id = str(uuid.uuid4())
        self.epoch: int | None = None
        #: Why the writer before this one's epoch no longer held the table when ``acquire`` took
        #: it ("process gone", "heartbeat expired (...)", "ended run"); None when it had let it go
        #: or there was none (the sink's ``seo_lease_takeovers_total`` counts the others).
        self.took_over_from: str | None = None
        #: How long ``acquire`` waits for a live writer *on this host* to let go before failing.
        #: 0 (fail at once) except under Spark Connect, where the worker of the query that just
        #: ended may take a few seconds to exit (and release) while the next query's worker starts.
        self.handover_wait_s = 0.0
        #: The Spark application and streaming query this writer commits for (module docstring:
        #: "a new run of the same query"); None outside a sink.
        self.spark_app: str | None = None
        self.query_id: str | None = None
        #: Optional: whether whoever holds the lease still needs it (the sink sets it to "is my
        #: SparkContext still running" - Spark says nothing to listeners when a session stops).
        #: The heartbeat gives the lease up the first time it answers False.
        self.holder_alive: Callable[[], bool] | None = None
        self._fenced = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: One ``release`` at a time (``release`` says why).
        self._releasing = threading.Lock()
        #: One heartbeat write at a time: a release waits for a beat in flight (``beat``).
        self._writing = threading.Lock()

    def _now(self) -> int:
        return int((self.clock or _wall_clock)() * 1000)

    # -- acquire / release -------------------------------------------------------------------

    def acquire(self) -> int:
        state = read_lease_state(self.storage, now_ms=self._now())
        deadline = time.monotonic() + self.handover_wait_s
        space = ProcessSpace.current()
        while (
            state is not None
            and state.alive
            and state.writer is not None
            and not self._supersedes(state.writer, space)
            and state.writer.same_process_space(space)
            and time.monotonic() < deadline
        ):
            # A writer on this very host may be on its way out (see ``handover_wait_s``).
            time.sleep(0.2)
            state = read_lease_state(self.storage, now_ms=self._now(), space=space)
        if state is not None and state.alive and state.writer is not None and self._supersedes(state.writer, space):
            log.warning(
                "taking table %s over from an ended run of query %s in Spark application %s (epoch %d, pid %d)",
                self.storage.root_uri,
                self.query_id,
                self.spark_app,
                state.epoch,
                state.writer.pid,
            )
        elif state is not None and state.alive:
            w = state.writer
            who = f"writer {w.writer_id[:8]} (pid {w.pid} on {w.host}" + (f", {w.description}" if w.description else "") + ")" if w else "a writer"
            raise ConcurrentWriterError(
                f"Table {self.storage.root_uri} is being written by {who}, epoch {state.epoch}, "
                f"{state.reason}. Only one writer may write a table: stop the other query first. If it "
                f"is dead, its lease expires {self.timeout_ms / 1000:.0f}s after its last heartbeat.",
                table=self.storage.root_uri,
                epoch=state.epoch,
            )
        epoch = (state.epoch if state is not None else 0) + 1
        space = ProcessSpace.current()
        info = WriterInfo(
            epoch=epoch,
            writer_id=self.writer_id,
            host=space.host,
            pid=os.getpid(),
            pid_start=process_start_time(os.getpid()),
            started_ms=self._now(),
            description=self.description,
            boot_id=space.boot_id,
            pid_namespace=space.pid_namespace,
            spark_app=self.spark_app,
            query_id=self.query_id,
        )
        try:
            self.storage.put_if_absent(f"{EPOCHS_DIR}/{epoch}", encode_record(info.to_json(), version=VERSION))
        except FileExistsError:
            raise ConcurrentWriterError(
                f"Another writer took over table {self.storage.root_uri} (epoch {epoch}) at the same moment. Only one writer may write a table.",
                table=self.storage.root_uri,
                epoch=epoch,
            ) from None
        self.epoch = epoch
        self._fenced = False
        self.took_over_from = None if state is None or state.reason == "released" else ("ended run" if state.alive else state.reason)
        self.beat()
        self._prune(epoch)
        return epoch

    def _supersedes(self, holder: WriterInfo, space: ProcessSpace) -> bool:
        """Whether ``holder`` is an ended run of our own query (module docstring)."""
        return (
            self.query_id is not None
            and self.spark_app is not None
            and holder.writer_id != self.writer_id
            and (holder.query_id, holder.spark_app) == (self.query_id, self.spark_app)
            and holder.same_process_space(space)
        )

    def _prune(self, epoch: int) -> None:
        """Delete epochs older than the newest ``KEEP_EPOCHS``, lowest first (see the module
        docstring: the order is what keeps a frozen writer fenced), with their side files."""
        for old in list_epochs(self.storage):
            if old >= epoch - KEEP_EPOCHS:
                break
            self.storage.delete(f"{EPOCHS_DIR}/{old}")
            for directory in EPOCH_SIDE_DIRS:
                self.storage.delete(f"{directory}/{old}")

    def release(self) -> None:
        """Stop heartbeating and mark the lease released so a successor need not wait.

        The epoch is given up for good: writing again means ``acquire`` - a new epoch with a
        heartbeat - never carrying on under an epoch the table already considers free."""
        self.stop_heartbeat()
        # One at a time, and the second finds nothing to do: under Spark Connect the SIGTERM
        # handler (``sink.query_watch.release_on_sigterm``) releases on a thread of its own and
        # then ends the process, while the query's end may be releasing on another thread. Both
        # wrote the released heartbeat; the exit cut one write short and left its temp file in
        # ``_seo/heartbeats`` (CI: ``seo verify`` warned of it after a torture run). Bounded: if
        # the holder is the thread the signal interrupted (in a Spark Connect worker the batch and
        # atexit run on the main thread), it cannot finish until the handler returns - so after
        # the wait this call writes anyway, as before: the lease is marked released and the epoch
        # given up either way (giving up instead left the lease alive for a successor
        # on another host, and a writer that carried on under the epoch it was releasing).
        got = self._releasing.acquire(timeout=2.0)
        try:
            # A beat still writing (an object store's retried PUT can take seconds) would land
            # after the released heartbeat and re-arm the lease: wait for it, bounded - and a
            # beat that outlives the wait finds the epoch gone and writes "released" itself.
            writing = self._writing.acquire(timeout=RELEASE_WAITS_FOR_BEAT_S)
            try:
                epoch, self.epoch = self.epoch, None
                if epoch is not None and not self._fenced and not epoch_fenced(self.storage, epoch):
                    self._write_heartbeat(epoch, released=True)
            finally:
                if writing:
                    self._writing.release()
        finally:
            self.epoch = None
            self._fenced = False
            if got:
                self._releasing.release()

    # -- fencing -----------------------------------------------------------------------------

    def is_fenced(self) -> bool:
        """A newer epoch exists, or ours was deleted (pruned after many takeovers, or by hand)."""
        if self.epoch is None:
            return False
        if not self._fenced and epoch_fenced(self.storage, self.epoch):
            self._fenced = True
        return self._fenced

    def holds(self) -> bool:
        """Whether this writer may still write: it has an epoch, and no newer writer fenced it."""
        return self.epoch is not None and not self.is_fenced()

    def check_fence(self, what: str = "publish") -> None:
        if self.epoch is None:
            raise WriterFencedError("This writer holds no lease; it must acquire one before it writes.")
        if self.is_fenced():
            raise fenced_error(self.storage, self.epoch, what)

    # -- heartbeat ---------------------------------------------------------------------------

    def _write_heartbeat(self, epoch: int, *, released: bool = False) -> None:
        beat = Heartbeat(epoch, self.writer_id, self._now(), self.timeout_ms, released)
        self.storage.atomic_write(f"{HEARTBEATS_DIR}/{epoch}", encode_record(beat.to_json(), version=VERSION))

    def beat(self) -> None:
        with self._writing:
            epoch = self.epoch
            if epoch is None or self.is_fenced():
                return
            try:
                self._write_heartbeat(epoch)
            finally:
                if self.epoch != epoch:
                    # released while this write was in flight (the release stopped waiting for
                    # it): the lease must read released, not alive
                    self._write_heartbeat(epoch, released=True)

    def start_heartbeat(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        interval = max(0.05, self.timeout_ms / 3000)

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    alive = self.holder_alive
                    if alive is not None and not alive():
                        self._give_up()
                        return
                    self.beat()
                except Exception:  # a missed beat only shortens our lease; never crash the query
                    pass
                if self._fenced:
                    return

        self._thread = threading.Thread(target=loop, name="seo-lease-heartbeat", daemon=True)
        self._thread.start()

    def _give_up(self) -> None:
        """``release`` from the heartbeat thread itself (which cannot join itself)."""
        with self._writing:
            epoch, self.epoch = self.epoch, None
            if epoch is not None and not self._fenced and not epoch_fenced(self.storage, epoch):
                self._write_heartbeat(epoch, released=True)
        self._thread = None

    def stop_heartbeat(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=RELEASE_JOINS_HEARTBEAT_S)
        self._thread = None
