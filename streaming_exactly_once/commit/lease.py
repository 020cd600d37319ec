"""Single-writer lease: epochs as fencing tokens, per-epoch heartbeats for liveness.

Bytes::

    _seo/epochs/4        v1
                         {"epoch":4,"writerId":"2f6c...","host":"vm","pid":4121,"pidStart":"86523","startedMs":1795313165250,"description":"events-ingest"}
    _seo/heartbeats/4    v1
                         {"epoch":4,"writerId":"2f6c...","heartbeatMs":1795313175250,"timeoutMs":60000,"released":false}

* **Fencing.** A writer owns the table from the moment it creates ``epochs/E`` (a
  create-if-absent write, so two writers can never hold the same epoch) until ``epochs/E+1``
  exists. Before claiming a batch and again right after claiming it (``commit.committer``) a
  writer checks that ``epochs/E+1`` does not exist; a writer that finds it raises
  ``WriterFencedError`` and never publishes. One ``exists`` call, whatever the history length.
* **Liveness.** Writer E rewrites only its own ``heartbeats/E`` (so a fenced writer cannot
  clobber its successor's record). A new writer may take over epoch E when E released the lease
  (clean stop), when E's process is gone (same host: pid and its start time are checked; a
  SIGKILLed writer is taken over at once) or when E's heartbeat is older than its timeout.
  Otherwise it fails fast with ``ConcurrentWriterError``. Clocks of different hosts must agree
  to well within the timeout.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConcurrentWriterError, WriterFencedError
from ..log.batch_log import parse_batch_file_name
from ..log.codec import field
from ..log.record_file import encode_record, read_record
from ..storage.base import Storage
from ..table.layout import EPOCHS_DIR, HEARTBEATS_DIR

VERSION = 1
KEEP_EPOCHS = 16
HINT = (
    "Lease files only say who writes the table. If you are sure no writer is running, delete "
    "this file and start again; the next writer takes a new epoch."
)


@dataclass(frozen=True)
class WriterInfo:
    epoch: int
    writer_id: str
    host: str
    pid: int
    pid_start: str | None
    started_ms: int
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "writerId": self.writer_id,
            "host": self.host,
            "pid": self.pid,
            "pidStart": self.pid_start,
            "startedMs": self.started_ms,
            "description": self.description,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "WriterInfo":
        return cls(
            epoch=field(obj, "epoch", int),
            writer_id=field(obj, "writerId", str),
            host=field(obj, "host", str),
            pid=field(obj, "pid", int),
            pid_start=field(obj, "pidStart", str, optional=True),
            started_ms=field(obj, "startedMs", int),
            description=field(obj, "description", str, optional=True, default=""),
        )


@dataclass(frozen=True)
class Heartbeat:
    epoch: int
    writer_id: str
    heartbeat_ms: int
    timeout_ms: int
    released: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "writerId": self.writer_id,
            "heartbeatMs": self.heartbeat_ms,
            "timeoutMs": self.timeout_ms,
            "released": self.released,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Heartbeat":
        return cls(
            epoch=field(obj, "epoch", int),
            writer_id=field(obj, "writerId", str),
            heartbeat_ms=field(obj, "heartbeatMs", int),
            timeout_ms=field(obj, "timeoutMs", int),
            released=field(obj, "released", bool, optional=True, default=False),
        )


@dataclass(frozen=True)
class LeaseState:
    """What a reader (``seo status``, a would-be writer) sees of the current owner."""

    epoch: int
    writer: WriterInfo | None
    heartbeat: Heartbeat | None
    alive: bool
    reason: str


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


def _read(storage: Storage, path: str, cls):
    return read_record(storage, path, cls.from_json, hint=HINT, version=VERSION)


def list_epochs(storage: Storage) -> list[int]:
    ids = []
    for entry in storage.list_dir(EPOCHS_DIR):
        parsed = parse_batch_file_name(entry.name)
        if parsed is not None and not parsed[1]:
            ids.append(parsed[0])
    return sorted(ids)


def read_lease_state(storage: Storage, *, now_ms: int | None = None, host: str | None = None) -> LeaseState | None:
    """The latest epoch's owner and whether it is still alive; None if no writer ever wrote."""
    epochs = list_epochs(storage)
    if not epochs:
        return None
    epoch = epochs[-1]
    writer = _read(storage, f"{EPOCHS_DIR}/{epoch}", WriterInfo)
    beat = _read(storage, f"{HEARTBEATS_DIR}/{epoch}", Heartbeat)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    host = socket.gethostname() if host is None else host
    if beat is not None and beat.released:
        return LeaseState(epoch, writer, beat, False, "released")
    if writer is not None and writer.host == host and not process_is_running(writer.pid, writer.pid_start):
        return LeaseState(epoch, writer, beat, False, "process gone")
    last = beat.heartbeat_ms if beat is not None else (writer.started_ms if writer else 0)
    timeout = beat.timeout_ms if beat is not None else 60_000
    age = now - last
    if age > timeout:
        return LeaseState(epoch, writer, beat, False, f"heartbeat expired ({age / 1000:.1f}s old)")
    return LeaseState(epoch, writer, beat, True, f"heartbeat {age / 1000:.1f}s ago")


class Lease:
    """This process's claim on one table (see the module docstring)."""

    def __init__(
        self,
        storage: Storage,
        *,
        timeout_ms: int = 60_000,
        description: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.storage = storage
        self.timeout_ms = timeout_ms
        self.description = description
        self.clock = clock
        self.writer_id = str(uuid.uuid4())
        self.epoch: int | None = None
        self._fenced = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _now(self) -> int:
        return int(self.clock() * 1000)

    # -- acquire / release -------------------------------------------------------------------

    def acquire(self) -> int:
        state = read_lease_state(self.storage, now_ms=self._now())
        if state is not None and state.alive:
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
        info = WriterInfo(
            epoch=epoch,
            writer_id=self.writer_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            pid_start=process_start_time(os.getpid()),
            started_ms=self._now(),
            description=self.description,
        )
        try:
            self.storage.put_if_absent(f"{EPOCHS_DIR}/{epoch}", encode_record(info.to_json(), version=VERSION))
        except FileExistsError:
            raise ConcurrentWriterError(
                f"Another writer took over table {self.storage.root_uri} (epoch {epoch}) at the same moment. "
                "Only one writer may write a table.",
                table=self.storage.root_uri,
                epoch=epoch,
            ) from None
        self.epoch = epoch
        self._fenced = False
        self.beat()
        for old in list_epochs(self.storage):
            if old < epoch - KEEP_EPOCHS:
                self.storage.delete(f"{EPOCHS_DIR}/{old}")
                self.storage.delete(f"{HEARTBEATS_DIR}/{old}")
        return epoch

    def release(self) -> None:
        """Stop heartbeating and mark the lease released so a successor need not wait."""
        self.stop_heartbeat()
        if self.epoch is not None and not self.is_fenced():
            self._write_heartbeat(released=True)

    # -- fencing -----------------------------------------------------------------------------

    def is_fenced(self) -> bool:
        if self.epoch is None:
            return False
        if not self._fenced and self.storage.exists(f"{EPOCHS_DIR}/{self.epoch + 1}"):
            self._fenced = True
        return self._fenced

    def check_fence(self, what: str = "publish") -> None:
        if self.epoch is None:
            raise WriterFencedError("This writer holds no lease; it must acquire one before it writes.")
        if self.is_fenced():
            raise WriterFencedError(
                f"This writer (epoch {self.epoch}) lost table {self.storage.root_uri} to a newer writer "
                f"(epoch {self.epoch + 1}) and will not {what} anything. Its in-flight batch, if its WAL "
                "entry was written in time, is completed by the new writer. Restart this query only after "
                "stopping the other one.",
                table=self.storage.root_uri,
                epoch=self.epoch,
            )

    # -- heartbeat ---------------------------------------------------------------------------

    def _write_heartbeat(self, *, released: bool = False) -> None:
        assert self.epoch is not None
        beat = Heartbeat(self.epoch, self.writer_id, self._now(), self.timeout_ms, released)
        self.storage.atomic_write(f"{HEARTBEATS_DIR}/{self.epoch}", encode_record(beat.to_json(), version=VERSION))

    def beat(self) -> None:
        if self.epoch is not None and not self.is_fenced():
            self._write_heartbeat()

    def start_heartbeat(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        interval = max(0.05, self.timeout_ms / 3000)

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.beat()
                except Exception:  # a missed beat only shortens our lease; never crash the query
                    pass
                if self._fenced:
                    return

        self._thread = threading.Thread(target=loop, name="seo-lease-heartbeat", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
