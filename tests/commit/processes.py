"""Writers of one table in their own processes, for fencing tests that need real SIGSTOP/SIGKILL.

Why processes: a writer frozen by a GC pause or a suspended VM stops *every* thread at once -
its heartbeat, its background janitor (staging cleanup, compaction preparation) and its commit.
Only a real ``SIGSTOP`` of a real process does that; a paused thread in the test process does
not. A fault-injecting storage (``streaming_exactly_once.testing.faults``) stops the writer
exactly at a named commit boundary (``pause_at``) or ``SIGKILL``s it there (``crash_at``), so
the interleavings are deterministic.

A child runs a small JSON *program* (``python -m tests.commit.processes PROGRAM``)::

    {"name": "A", "root": "/tmp/t" | "s3://bucket/t", "group": ["t0", "t1"] | null,
     "storage_options": {"endpoint_url": ...} | null,   # open_storage's options (an S3 endpoint)
     "options": {"lease_timeout_ms": 2000, "compact_interval": 3, ...},   # CommitterOptions
                                                   # ("compaction": CompactionPolicy's fields)
     "delta": {"checkpoint_interval": 3} | null,   # format="delta" (DeltaSettings; group: every table),
                                                   # partitioned by p unless options say otherwise
     "steps": [{"do": "open"}, {"do": "commits", "query": Q, "count": 2, "base": 0}, ...]}

Steps (each reports what happened as one JSON line on stdout, see ``Writer.events``):

* ``new``      - a fresh committer object (a new writer in the same process: new lease)
* ``open``     - take the lease and recover; ``retry_s`` retries ``ConcurrentWriterError`` for a
                 while (the predecessor's heartbeat may be a few ms younger than we waited)
* ``arm``      - replace the fault hooks: ``pause_at`` / ``crash_at`` counted from here
* ``commits``  - ``count`` attempts to commit Spark batches of ``query``, each of ``rows`` rows
                 (ids from ``batch_rows``) in ``files`` files, ``mode`` rename|direct; a failed
                 batch is retried by the next attempt (what Spark does) unless
                 ``after_error`` is ``stop``; ``pause_at``/``crash_at`` arm the hooks for the
                 first attempt (its event says ``inflight``); ``until`` keeps committing (at
                 least ``count``) until that file exists; ``drain`` waits for the background
                 work after each batch (batches spaced out in time); ``schema`` (a Spark schema
                 JSON, e.g. ``EXTRA_SCHEMA_JSON``) is the batches' schema from then on (default
                 none; ``SCHEMA_JSON`` with ``delta``)
* ``stage``    - begin a batch and stage its data, then hold it; ``finish`` commits it
* ``touch`` / ``wait`` - files the parent and other writers synchronise on
* ``drain``, ``close``, ``sleep``, ``hang`` (until killed)

An error outside ``commits``/``stage``/``finish`` ends the program with exit code 1.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

QA = "aaaaaaaa-0000-0000-0000-000000000001"
QB = "bbbbbbbb-0000-0000-0000-000000000002"
QC = "cccccccc-0000-0000-0000-000000000003"
QZ = "dddddddd-0000-0000-0000-000000000004"


def batch_rows(base: int, spark_batch: int, rows: int) -> list[int]:
    """The row ids of one Spark batch: unique across writers as long as their bases are apart."""
    start = base + spark_batch * rows
    return list(range(start, start + rows))


# -- the parent's side ------------------------------------------------------------------------


def process_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return None


class Writer:
    """A child writer process; its events and stderr are collected by pump threads."""

    def __init__(self, program: dict[str, Any], *, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.program = program
        self.name = program.get("name", "writer")
        environ = dict(os.environ)
        environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        for key in ("SEO_CRASH_AT", "SEO_FAIL_AT", "SEO_PAUSE_AT"):
            environ.pop(key, None)
        environ.update(env or {})
        cmd = [*prefix, sys.executable, "-m", "tests.commit.processes", json.dumps(program)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self._events: list[dict[str, Any]] = []
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._changed = threading.Condition()
        self._pumps = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, True), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, False), daemon=True),
        ]
        for t in self._pumps:
            t.start()

    def _pump(self, stream, is_stdout: bool) -> None:
        for line in stream:
            with self._changed:
                if is_stdout:
                    self._stdout.append(line)
                    if line.startswith("{"):
                        try:
                            self._events.append(json.loads(line))
                        except ValueError:
                            pass
                else:
                    self._stderr.append(line)
                self._changed.notify_all()

    # -- what it said -------------------------------------------------------------------------

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self._changed:
            return [e for e in self._events if kind is None or e.get("event") == kind]

    def commits(self) -> list[dict[str, Any]]:
        return self.events("commit")

    def output(self, tail: int = 4000) -> str:
        with self._changed:
            text = f"--- {self.name} stdout\n" + "".join(self._stdout) + f"--- {self.name} stderr\n" + "".join(self._stderr)
        return text[-tail:]

    # -- control ------------------------------------------------------------------------------

    def wait_stopped(self, timeout: float = 30.0) -> None:
        """Until the child stopped itself at its ``pause_at`` boundary (SIGSTOP)."""
        deadline = time.time() + timeout
        while process_state(self.pid) != "T":
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited (rc={self.proc.returncode}) instead of stopping at its pause point\n{self.output()}")
            if time.time() > deadline:
                raise AssertionError(f"{self.name} did not reach its pause point in {timeout:.0f}s\n{self.output()}")
            time.sleep(0.02)

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        deadline = time.time() + timeout
        while not predicate():
            if self.proc.poll() is not None and not predicate():
                raise AssertionError(f"{self.name} exited (rc={self.proc.returncode}) before {what}\n{self.output()}")
            if time.time() > deadline:
                raise AssertionError(f"{self.name}: no {what} within {timeout:.0f}s\n{self.output()}")
            time.sleep(0.02)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)  # ends a stopped process too
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._join()

    def wait(self, timeout: float = 30.0) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not finish within {timeout:.0f}s\n{self.output()}") from None
        self._join()
        return rc

    def _join(self) -> None:
        for t in self._pumps:
            t.join(timeout=5)


def stop_all(writers: list[Writer]) -> None:
    """Kill whatever is left of a scenario (also stopped children: SIGKILL ends them too)."""
    for w in writers:
        try:
            w.kill()
        except (ProcessLookupError, OSError):
            pass


# -- the child's side ---------------------------------------------------------------------------


def _emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event, default=str) + "\n")
    sys.stdout.flush()


#: Spark schema JSON of the rows ``_parquet_bytes`` writes, with the partition column ``p``.
SCHEMA_JSON = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
#: ``SCHEMA_JSON`` with a column added (a batch that evolves the table with ``add_columns``; its
#: files lack the column, which readers of the table schema read as null).
EXTRA_SCHEMA_JSON = json.dumps(
    {
        "type": "struct",
        "fields": [
            *json.loads(SCHEMA_JSON)["fields"],
            {"name": "extra", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


def _parquet_bytes(rows: list[int]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), buf)
    return buf.getvalue()


def _chunks(rows: list[int], n: int) -> list[list[int]]:
    return [c for c in (rows[i::n] for i in range(max(1, n))) if c]


class _Child:
    def __init__(self, program: dict[str, Any]) -> None:
        from streaming_exactly_once.storage import open_storage
        from streaming_exactly_once.testing.faults import FaultInjectingStorage

        self.p = program
        self.name = program.get("name", "writer")
        self.storage = FaultInjectingStorage(open_storage(program["root"], program.get("storage_options")))  # ``arm`` gives it rules
        self.c = None
        self.next_batch: dict[str, int] = {}
        self.held = None
        self.step_index = -1
        self.schema: str | None = None  # the batches' schema (``commits``' ``schema``)
        self.new()

    def new(self) -> None:
        from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
        from streaming_exactly_once.commit.groups.group_committer import GroupCommitter
        from streaming_exactly_once.delta.target import DeltaSettings

        opts = {"heartbeat": True, "lease_timeout_ms": 2000, **self.p.get("options", {})}
        if self.p.get("delta") is not None:
            opts["delta"] = DeltaSettings(**self.p["delta"])
            opts.setdefault("partition_by", ("p",))
        if self.p.get("iceberg") is not None:  # {"snapshots_to_keep": N} or {}: the path-based default
            from streaming_exactly_once.iceberg.settings import IcebergSettings

            opts["iceberg"] = IcebergSettings(**self.p["iceberg"])
            opts.setdefault("partition_by", ("p",))
        opts["partition_by"] = tuple(opts.get("partition_by", ()))
        if isinstance(opts.get("compaction"), dict):  # CompactionPolicy's fields
            from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy

            opts["compaction"] = CompactionPolicy(**opts["compaction"])
        cls = GroupCommitter if self.p.get("group") else TableCommitter
        self.c = cls(self.storage, CommitterOptions(**opts))

    def arm(self, pause_at: str | None = None, crash_at: str | None = None) -> None:
        from streaming_exactly_once.testing.faults import rules

        self.storage.arm(rules(crash_at=crash_at, pause_at=pause_at))

    # -- one batch, the way the sink does it -----------------------------------------------------

    def _begin_and_stage(self, query: str, spark_batch: int, rows: list[int], *, files: int, mode: str):
        from streaming_exactly_once.checkpoint.reader import InputFile

        c = self.c
        c.ensure_open()
        if c.is_committed(query, spark_batch):
            return None
        c.adopt_existing(lambda: self.schema or SCHEMA_JSON)  # as the sink does before it stages a first batch
        attempt = c.begin(query, spark_batch, mode="rename" if self.p.get("group") else mode)
        try:
            c.storage.makedirs(attempt.staging_dir)  # as the sink does before its writer runs
            staged = self._stage_group(attempt, rows, files) if self.p.get("group") else self._stage_table(attempt, rows, files, mode)
        except BaseException as exc:  # as the sink's ``committer.batch`` does
            c.abort(attempt)
            c.invalidate()
            fenced = c.fenced_cause_of(exc)
            if fenced is not None:
                raise fenced from exc
            raise
        inputs = [InputFile(source=0, path=f"file:///in/{query[:8]}-{spark_batch}.csv", timestamp=1)]
        return attempt, staged, inputs, len(rows)

    def _stage_table(self, attempt, rows, files, mode):
        from streaming_exactly_once.commit.committer import StagedFile

        st = self.c.storage
        out = []
        for i, chunk in enumerate(_chunks(rows, files)):
            name = f"part-{i:05d}-{attempt.attempt}-{attempt.batch_id}.c000.snappy.parquet"
            final = f"p=a/{name}"
            payload = _parquet_bytes(chunk)
            if mode == "rename":
                staged = f"{attempt.staging_dir}/data/{final}"
                st.put_if_absent(staged, payload)
            else:  # direct: the intent names the final file before it is written
                st.put_if_absent(f"{attempt.staging_dir}/intents/{name}", final.encode())
                st.put_if_absent(final, payload)
                staged = None
            info = st.info(staged or final)
            out.append(StagedFile(final=final, size=info.size, mtime_ms=info.mtime_ms, staged=staged))
        return out

    def _stage_group(self, attempt, rows, files):
        from streaming_exactly_once.commit.committer import StagedFile
        from streaming_exactly_once.commit.groups.group_committer import MemberBatch

        st = self.c.storage
        tables = list(self.p["group"])
        members = []
        for t_index, table in enumerate(tables):
            part = rows[t_index :: len(tables)]
            staged_files = []
            for i, chunk in enumerate(_chunks(part, files)):
                name = f"part-{i:05d}-{attempt.attempt}-{attempt.batch_id}.c000.snappy.parquet"
                final = f"p=a/{name}"
                staged = f"{attempt.staging_dir}/data/{table}/{final}"
                st.put_if_absent(staged, _parquet_bytes(chunk))
                info = st.info(staged)
                staged_files.append(StagedFile(final=final, size=info.size, mtime_ms=info.mtime_ms, staged=staged))
            if part:
                formats = [f for f in ("delta", "iceberg") if self.p.get(f) is not None]
                members.append(
                    MemberBatch(
                        table=table,
                        files=staged_files,
                        rows=len(part),
                        format="+".join(formats) or "parquet",
                        partition_by=("p",) if formats else (),
                        schema=self._schema(),
                    )
                )
        return members

    def _commit_staged(self, attempt, staged, inputs, num_rows):
        c = self.c
        try:
            if self.p.get("group"):
                return c.commit_group(attempt, staged, input_files=inputs)
            return c.commit(attempt, staged, input_files=inputs, num_rows=num_rows, schema=self._schema())
        except BaseException as exc:  # as the sink's ``committer.batch`` does: the ledger reads the
            c.abort(attempt)  # staged files before the claim, which a successor may have removed
            c.invalidate()
            fenced = c.fenced_cause_of(exc)
            if fenced is not None:
                raise fenced from exc
            raise

    def _schema(self) -> str | None:
        return self.schema or (SCHEMA_JSON if self.p.get("delta") is not None or self.p.get("iceberg") is not None else None)

    def _report(self, query, spark_batch, rows, fn, **extra) -> bool:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which judges it
            _emit(
                event="commit",
                writer=self.name,
                query=query,
                batch=spark_batch,
                rows=rows,
                status="error",
                error=type(exc).__name__,
                message=str(exc)[:600],
                epoch=self.c.epoch,
                step=self.step_index,
                **extra,
            )
            return False
        status = "duplicate" if result is None else result.status
        _emit(
            event="commit",
            writer=self.name,
            query=query,
            batch=spark_batch,
            rows=rows,
            status=status,
            manifestBatch=None if result is None else result.batch_id,
            epoch=self.c.epoch,
            step=self.step_index,
            **extra,
        )
        return True

    # -- steps ----------------------------------------------------------------------------------

    def do_open(self, retry_s: float = 0.0) -> None:
        from streaming_exactly_once.errors import ConcurrentWriterError

        deadline = time.time() + retry_s
        while True:
            try:
                report = self.c.open()
                break
            except ConcurrentWriterError:
                if time.time() >= deadline:
                    raise
                time.sleep(0.05)
        _emit(event="open", writer=self.name, epoch=self.c.epoch, recovery=str(report))

    def do_commits(
        self,
        query: str,
        count: int = 1,
        base: int = 0,
        rows: int = 5,
        files: int = 2,
        mode: str = "rename",
        first: int | None = None,
        after_error: str = "retry",
        drain: bool = False,
        sleep_s: float = 0.0,
        pause_at: str | None = None,
        crash_at: str | None = None,
        until: str | None = None,
        max_count: int = 200,
        schema: str | None = None,
    ) -> None:
        if schema is not None:
            self.schema = schema
        if first is not None:
            self.next_batch[query] = first
        if pause_at or crash_at:
            self.arm(pause_at=pause_at, crash_at=crash_at)
        done = 0
        while done < count or (until is not None and not os.path.exists(until) and done < max_count):
            b = self.next_batch.get(query, 0)
            ids = batch_rows(base, b, rows)

            def one(b=b, ids=ids):
                staged = self._begin_and_stage(query, b, ids, files=files, mode=mode)
                return None if staged is None else self._commit_staged(*staged)

            ok = self._report(query, b, ids, one, inflight=bool(done == 0 and (pause_at or crash_at)), attempt=done)
            done += 1
            if ok:
                self.next_batch[query] = b + 1
            elif after_error == "stop":
                break
            if drain:
                self.c.janitor.drain()
            if sleep_s:
                time.sleep(sleep_s)

    def do_stage(self, query: str, batch: int, base: int = 0, rows: int = 5, files: int = 2, mode: str = "rename") -> None:
        ids = batch_rows(base, batch, rows)
        try:
            self.held = (query, batch, ids, self._begin_and_stage(query, batch, ids, files=files, mode=mode))
            _emit(event="staged", writer=self.name, query=query, batch=batch, manifestBatch=self.held[3][0].batch_id)
        except Exception as exc:  # noqa: BLE001
            _emit(
                event="commit",
                writer=self.name,
                query=query,
                batch=batch,
                rows=ids,
                status="error",
                error=type(exc).__name__,
                message=str(exc)[:600],
                epoch=self.c.epoch,
                step=self.step_index,
            )
            self.held = None

    def do_finish(self) -> None:
        if self.held is None:
            return
        query, batch, ids, staged = self.held
        self.held = None
        if self._report(query, batch, ids, lambda: self._commit_staged(*staged)):
            self.next_batch[query] = batch + 1

    def do_touch(self, path: str) -> None:
        Path(path).write_text("")

    def do_wait(self, path: str, timeout_s: float = 60.0) -> None:
        deadline = time.time() + timeout_s
        while not os.path.exists(path):
            if time.time() > deadline:
                raise TimeoutError(f"{self.name}: {path} did not appear in {timeout_s}s")
            time.sleep(0.02)

    def do_drain(self) -> None:
        self.c.janitor.drain()

    def do_close(self) -> None:
        self.c.close()
        _emit(event="closed", writer=self.name, epoch=self.c.epoch)

    def do_new(self) -> None:
        self.new()

    def do_arm(self, pause_at: str | None = None, crash_at: str | None = None) -> None:
        self.arm(pause_at=pause_at, crash_at=crash_at)

    def do_sleep(self, s: float) -> None:
        time.sleep(s)

    def do_hang(self) -> None:
        while True:
            time.sleep(1)

    def run(self) -> int:
        for index, step in enumerate(self.p["steps"]):
            self.step_index = index
            step = dict(step)
            name = step.pop("do")
            try:
                getattr(self, f"do_{name}")(**step)
            except Exception as exc:  # noqa: BLE001
                _emit(event="error", writer=self.name, step=name, error=type(exc).__name__, message=str(exc)[:600])
                return 1
        _emit(event="exit", writer=self.name)
        return 0


def main(argv: list[str]) -> int:
    import logging

    from streaming_exactly_once.testing.lease_clock import install_from_env

    install_from_env()  # the test's shared lease clock, if it gave one
    name = json.loads(argv[0]).get("name", "")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"%(asctime)s {name} %(name)s %(levelname)s %(message)s")
    return _Child(json.loads(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
