"""The commit path without Spark: overhead per step, cost vs history, recovery time, memory.

The Spark write is replaced by pre-made files so that only the sink's own work is timed:

* **overhead** - rename mode, real staged files, N batches: median/p99 of every step
  (intent, WAL, moves, manifest, sources, commit record, WAL delete) and of the total.
* **history** - direct mode with synthetic file entries (no data files are touched by a direct
  commit), many batches and many live files: per-batch latency against batch id, compaction
  batches included, within a time box; peak RSS of the process.
* **recovery** - a fresh process opens a table of H batches that crashed with a pending WAL
  entry, recovers and commits one batch: time from process start, for several H.
* **observability** - what the metrics and lineage hooks add to a batch (``bench_observability``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .stats import summary

if TYPE_CHECKING:
    from .commit_anatomy import CommitAnatomy

QUERY = "77777777-7777-7777-7777-777777777777"


def _committer(root: str, *, faulty: bool = False, storage_options: dict[str, Any] | None = None, **opts):
    from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
    from streaming_exactly_once.storage import open_storage
    from streaming_exactly_once.testing.faults import FaultInjectingStorage

    options = CommitterOptions(heartbeat=False, **opts)
    storage = open_storage(root, storage_options or {})
    committer = TableCommitter(FaultInjectingStorage(storage) if faulty else storage, options)
    committer.open()
    return committer


def _stage(root: Path, staging: str, batch: int, files_per_batch: int, payload: bytes) -> list[tuple[str, str]]:
    """Write a batch's files under ``staging`` as Spark's writer would (no fsync): (staged, final)."""
    pairs = []
    for i in range(files_per_batch):
        rel = f"day={i % 4}/part-{i:05d}-{batch:08d}.c000.snappy.parquet"
        staged = f"{staging}/data/{rel}"
        path = root / staged
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
        pairs.append((staged, rel))
    return pairs


def _floor_batch(storage: Any, batch: int, pairs: list[tuple[str, str]], pool: Any) -> None:
    """The durable writes a batch cannot do without, in the order it needs them, with the
    storage's own primitives: the staged bytes synced while the claim is written (both only
    wait on the disk), the renames and their directories synced, then the manifest entry and
    the commit record, each durable before the next. Deleting the claim is no durable write
    and is off the batch's path in the commit too (its janitor), so it is off the floor's."""
    syncing = pool.submit(storage.sync, [staged for staged, _ in pairs])
    storage.put_if_absent(f"_seo/wal/{batch}", b"v3\n" + b"x" * 600)
    syncing.result()
    for staged, final in pairs:
        storage.rename(staged, final)
    storage.sync([final for _, final in pairs], contents=False)
    storage.put_if_absent(f"_spark_metadata/{batch}", b"v1\n" + b"x" * 250 * len(pairs))
    storage.put_if_absent(f"_seo/commits/{batch}", b"v1\n" + b"x" * 700)
    pool.submit(storage.delete, f"_seo/wal/{batch}")


def overhead(*, batches: int, files_per_batch: int, work: Path) -> dict[str, Any]:
    """The commit path's cost per batch, and beside it - batch by batch, interleaved, so that
    both see the same disk - the cost of its necessary durable writes alone (``_floor_batch``)."""
    from concurrent.futures import ThreadPoolExecutor

    from streaming_exactly_once.commit.committer import StagedFile
    from streaming_exactly_once.storage import open_storage

    root = work / "overhead"
    floor_root = work / "overhead-floor"
    c = _committer(str(root))
    floor_storage = open_storage(str(floor_root))
    pool = ThreadPoolExecutor(max_workers=2)
    steps: dict[str, list[float]] = {}
    totals = []
    floor = []
    payload = b"x" * 4096
    for b in range(batches):
        t0 = time.perf_counter()
        attempt = c.begin(QUERY, b, mode="rename")
        t_intent = time.perf_counter() - t0
        files = [
            StagedFile(final=final, size=len(payload), mtime_ms=int(time.time() * 1000), staged=staged)
            for staged, final in _stage(root, attempt.staging_dir, b, files_per_batch, payload)
        ]
        t1 = time.perf_counter()
        result = c.commit(attempt, files, num_rows=1000)
        totals.append((time.perf_counter() - t1 + t_intent) * 1000)
        for key, value in result.timings.items():
            steps.setdefault(key, []).append(value)
        pairs = _stage(floor_root, f"staging/{b}", b, files_per_batch, payload)
        t2 = time.perf_counter()
        _floor_batch(floor_storage, b, pairs, pool)
        floor.append((time.perf_counter() - t2) * 1000)
    c.close()
    pool.shutdown()
    return {
        "batches": batches,
        "files_per_batch": files_per_batch,
        "total_ms": summary(totals),
        "floor_ms": summary(floor),
        "above_floor_ms": summary([t - f for t, f in zip(totals, floor, strict=True)]),
        "steps_ms": {k: summary(v) for k, v in steps.items()},
    }


def _write_seed_compact(fh: Any, prefix: str, live_files: int) -> None:
    """A ``9.compact`` listing ``live_files`` files under ``prefix`` (the table's root URI)."""
    line = (
        '{"path":"%s/day=%%d/part-%%012d-seed.c000.snappy.parquet","size":1000000,"isDir":false,'
        '"modificationTime":1795313165250,"blockReplication":1,"blockSize":33554432,"action":"add"}'
    ) % prefix
    fh.write("v1")
    for i in range(live_files):
        fh.write("\n" + line % (i % 28, i))


def _build_index(uri: str, storage_options: dict[str, Any]) -> None:
    """The reader index of ``9.compact``, as the sink leaves a table it wrote - in a child
    process: neither its memory nor its threads count in the caller's."""
    build = "from streaming_exactly_once.manifest.manifest_index import write_index; from streaming_exactly_once.storage import open_storage; "
    build += f"assert write_index(open_storage({uri!r}, {storage_options!r}), 9)"
    repo = str(Path(__file__).resolve().parent.parent)
    subprocess.run([sys.executable, "-c", build], check=True, cwd=repo, env={**os.environ, "PYTHONPATH": repo})


def seed_manifest(root: Path, live_files: int, *, index: bool = True) -> None:
    """A table whose manifest already lists ``live_files`` files: one ``9.compact``, with its
    reader index as the sink leaves a table it wrote (``seo index`` builds it for an adopted
    one; ``index=False``: a table adopted from Spark's sink, whose first compaction reads and
    indexes the whole file)."""
    meta = root / "_spark_metadata"
    meta.mkdir(parents=True)
    with open(meta / "9.compact", "w") as fh:
        _write_seed_compact(fh, f"file://{root}", live_files)
        fh.flush()
        # written back now, not by the kernel's flusher 30 s into the timed batches
        os.fsync(fh.fileno())
    if index:
        _build_index(str(root), {})


def seed_manifest_s3(uri: str, storage_options: dict[str, Any], live_files: int, work: Path) -> None:
    """``seed_manifest`` for a table on S3: the compact object is uploaded, then indexed."""
    import boto3

    local = work / "seed.compact"
    with open(local, "w") as fh:
        _write_seed_compact(fh, uri, live_files)
    bucket, _, key = uri[len("s3://") :].partition("/")
    client = boto3.client(
        "s3", endpoint_url=storage_options["endpoint_url"], aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    client.upload_file(str(local), bucket, f"{key}/_spark_metadata/9.compact")
    local.unlink()
    _build_index(uri, storage_options)


def _sparse_files(root: Path, files: list[Any]) -> None:
    """The batch's files on disk at their recorded sizes, as holes: the commit reads each file's
    tail for its ledger checksum."""
    for f in files:
        path = root / f.final
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            fh.truncate(f.size)


def history(
    *,
    batches: int,
    files_per_batch: int,
    work: Path,
    time_box_s: float,
    interval_s: float = 0.0,
    seed_live_files: int = 0,
    prepare: bool = True,
    s3: dict[str, Any] | None = None,
    anatomy: CommitAnatomy | None = None,
) -> dict[str, Any]:
    """Per-batch commit latency vs batch id. ``interval_s`` spaces batches like a real trigger;
    ``seed_live_files`` starts from a manifest that already lists that many files; ``s3``
    (``{"uri", "options"}``) puts the table on an S3 endpoint instead of local disk;
    ``anatomy`` (open) records each commit's breakdown."""
    from streaming_exactly_once.commit.committer import StagedFile
    from streaming_exactly_once.log.compaction import is_compaction_batch
    from streaming_exactly_once.manifest.manifest_index import warm_up

    root = work / f"history-{int(interval_s * 1000)}ms-{seed_live_files}-{prepare}"
    uri, storage_options = (s3["uri"], s3["options"]) if s3 else (str(root), {})
    if seed_live_files:
        if s3:
            work.mkdir(parents=True, exist_ok=True)
            seed_manifest_s3(uri, storage_options, seed_live_files, work)
        else:
            seed_manifest(root, seed_live_files)
    c = _committer(uri, storage_options=storage_options, min_batches_to_retain=100, cleanup_delay_ms=0, prepare_compactions=prepare)
    # What a writer does in the background once it opened a table - the imports of its first
    # index build, the copy for the next compaction - ends before the first timed batch, as in a
    # streaming query, whose first batch comes seconds after the sink opened the table: the
    # timed batches show what history costs, not what a cold process does in its first second.
    c.janitor.drain()
    # The modules an index build imports (pandas through pyarrow, ~0.45 s of the first one) are
    # loaded in a driver that has used Arrow, and a large table's writer loads them once it
    # opened the table: here, where only this loop runs, they would land in the first batches.
    warm_up()
    first_batch = c.latest_batch_id + 1
    latencies: list[float] = []
    other: list[float] = []
    compaction: list[tuple[int, float]] = []
    deadline = time.time() + time_box_s
    now = int(time.time() * 1000)
    done = 0
    for b in range(first_batch, first_batch + batches):
        if time.time() > deadline:
            break
        attempt = c.begin(QUERY, b, mode="direct")
        files = [
            StagedFile(final=f"day={(b // 1000) % 28}/part-{i:05d}-{b:08d}-6f1f4e1c-2d7e-4c1b.c000.snappy.parquet", size=1_000_000 + i, mtime_ms=now)
            for i in range(files_per_batch)
        ]
        if not s3:
            _sparse_files(root, files)
        is_compaction = is_compaction_batch(b, c.logs.manifest.interval)
        if anatomy is not None:
            anatomy.start()
        t0 = time.perf_counter()
        result = c.commit(attempt, files, num_rows=10_000)
        ms = (time.perf_counter() - t0) * 1000
        latencies.append(ms)
        if anatomy is not None:
            anatomy.stop(b, compaction=is_compaction, timings=result.timings)
        if is_compaction:
            compaction.append((b, ms))
        else:
            other.append(ms)
        done += 1
        if interval_s:
            time.sleep(interval_s)
    c.close()
    window = max(100, done // 50)
    windows = []
    for start in range(0, done, window):
        chunk = latencies[start : start + window]
        windows.append({"from": start, "to": start + len(chunk) - 1, **summary(chunk)})
    first = summary(latencies[:window])
    last = summary(latencies[-window:])
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    compact_size = max((e.size for e in c.storage.list_dir("_spark_metadata") if e.name.endswith(".compact")), default=0)
    shutil.rmtree(root, ignore_errors=True)
    return {
        "batches": done,
        "files_per_batch": files_per_batch,
        "live_files": seed_live_files + done * files_per_batch,
        "interval_s": interval_s,
        "seeded_live_files": seed_live_files,
        "prepared_compaction": prepare,
        "all_ms": summary(latencies),
        "first_window_ms": first,
        "last_window_ms": last,
        "p99_ratio_last_vs_first": last["p99"] / first["p99"] if first["p99"] else None,
        "windows": windows,
        "compaction_ms": compaction[-20:],
        "compaction_summary_ms": summary([ms for _, ms in compaction]),
        "other_batches_ms": summary(other),
        "largest_compact_bytes": compact_size,
        "peak_rss_mb": peak_rss_mb,
        "timed_out": done < batches,
    }


_RECOVERY_CHILD = r"""
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile, TableCommitter
from streaming_exactly_once.storage import open_storage
c = TableCommitter(open_storage({root!r}), CommitterOptions(heartbeat=False))
report = c.open()
attempt = c.begin({query!r}, {batch}, mode="direct")
c.storage.put_if_absent("day=0/part-new.parquet", b"x")  # the ledger reads the batch's file
c.commit(attempt, [StagedFile(final="day=0/part-new.parquet", size=1, mtime_ms=c.storage.info("day=0/part-new.parquet").mtime_ms)], num_rows=1)
first_commit = time.perf_counter() - t0  # the first new batch is published: what a restart waits for
c.close()  # drains background work (preparing the next compaction), not part of the restart
print(first_commit, report.rolled_forward)
"""


def recovery(*, histories: list[int], work: Path) -> dict[str, Any]:
    from streaming_exactly_once.commit.committer import StagedFile
    from streaming_exactly_once.testing.faults import rules

    out = {}
    repo = str(Path(__file__).resolve().parents[1])
    for h in histories:
        root = work / f"recovery-{h}"
        # Retention as on any table older than ``cleanup_delay`` (default 10 min): the log
        # directories keep ~min_batches_to_retain files. Start-up lists them, so without
        # retention (a table younger than the delay) it is O(files in them): ~2 s at 10,000.
        c = _committer(str(root), faulty=True, cleanup_delay_ms=0)  # ``arm`` injects the crash below
        for b in range(h):
            attempt = c.begin(QUERY, b, mode="direct")
            files = [StagedFile(final=f"day=0/part-{b:08d}-{i}.parquet", size=10, mtime_ms=1) for i in range(10)]
            _sparse_files(root, files)  # the ledger reads each file
            c.commit(attempt, files, num_rows=10)
        c.storage.arm(rules(fail_at="after-wal@1"))  # the crash: a claimed, unfinished batch
        attempt = c.begin(QUERY, h, mode="direct")
        # the crashed batch's file exists (a direct-mode claim naming a missing file is never
        # rolled forward): its intent first, then the file under its final name, as the sink does
        final = "day=0/part-crashed.parquet"
        c.storage.put_if_absent(f"{attempt.staging_dir}/intents/part-crashed.parquet", final.encode())
        c.storage.put_if_absent(final, b"x" * 10)
        try:
            c.commit(attempt, [StagedFile(final=final, size=10, mtime_ms=c.storage.info(final).mtime_ms)], num_rows=1)
        except Exception:
            pass
        c.lease.release()
        t0 = time.perf_counter()
        child = _RECOVERY_CHILD.format(repo=repo, root=str(root), query=QUERY, batch=h + 1)
        proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        inner, rolled = proc.stdout.split(" ", 1)
        # the child's clock starts before its imports and stops when the first new batch is
        # published; the rest of ``wall`` is the interpreter's start-up and the drain at close
        out[str(h)] = {
            "process_start_to_first_commit_s": float(inner),
            "whole_process_s": round(wall, 3),
            "rolled_forward": rolled.strip(),
        }
        print(f"  recovery with {h:>7,} batches of history: {float(inner):.3f} s from interpreter start to first new commit", flush=True)
        shutil.rmtree(root, ignore_errors=True)
    return out


def seeded(*, live: list[int], batches: int, work: Path) -> dict[str, Any]:
    """Back-to-back batches on a manifest that already lists N live files (one ``9.compact``),
    for each N, with the next compaction prepared in the background and without: the p99 of
    every batch (a tenth of them compactions) against the same run at 100 live files."""
    out: dict[str, Any] = {}
    for n in live:
        for prepare in (True, False):
            r = history(batches=batches, files_per_batch=10, work=work, time_box_s=900, seed_live_files=n, prepare=prepare)
            key = f"{n}-{'prepared' if prepare else 'unprepared'}"
            out[key] = {k: r[k] for k in ("batches", "live_files", "all_ms", "compaction_summary_ms", "other_batches_ms", "peak_rss_mb")}
            a = r["all_ms"]
            print(f"  {n:>9,} live files, {key.split('-')[1]:10s}: median {a['median']:.1f} ms, p99 {a['p99']:.1f} ms", flush=True)
    return out


_MOTO_CHILD = r"""
import logging, sys, time
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the parent closes it
"""


class MotoProcess:
    """moto's S3 server in a child process (port 0): its request handling does not share the
    timed process's interpreter, as a real endpoint would not."""

    def __enter__(self) -> MotoProcess:
        import boto3

        self.child = subprocess.Popen([sys.executable, "-c", _MOTO_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.client: Any = None
        self.options: dict[str, Any] = {}
        assert self.child.stdout is not None
        port = int(self.child.stdout.readline())
        endpoint = f"http://127.0.0.1:{port}"
        self.client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
        self.options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(timeout=30)


def seeded_s3(*, live: list[int], batches: int, work: Path) -> dict[str, Any]:
    """``seeded`` on moto's S3 server, the next compaction prepared in the background: with the
    server-side copy (``seo_server_side_copy``: the previous compact object is the first part of
    a multipart upload, copied by the server) and with the default single PUT, whose bytes the
    writer sends. One bucket per case; a fresh server per live-file count (moto keeps objects in
    memory)."""
    out: dict[str, Any] = {}
    for n in live:
        with MotoProcess() as moto:
            for server_copy in (True, False):
                key = f"{n}-{'server-copy' if server_copy else 'single-put'}"
                bucket = f"bench-{n}-{int(server_copy)}"
                moto.client.create_bucket(Bucket=bucket)
                s3 = {"uri": f"s3://{bucket}/table", "options": {**moto.options, "seo_server_side_copy": server_copy}}
                r = history(batches=batches, files_per_batch=10, work=work / key, time_box_s=900, seed_live_files=n, s3=s3)
                out[key] = {k: r[k] for k in ("batches", "live_files", "all_ms", "compaction_summary_ms", "other_batches_ms", "peak_rss_mb")}
                a = r["all_ms"]
                print(f"  s3 {n:>9,} live files, {key.split('-', 1)[1]:11s}: median {a['median']:.1f} ms, p99 {a['p99']:.1f} ms", flush=True)
    return out


def spaced_s3(*, live: int, batches: int, work: Path) -> dict[str, Any]:
    """Batches 1 s apart on moto's S3 server on a manifest of ``live`` files, the server-side
    copy on: the compaction's copy is begun after the previous compaction and done long before
    its batch."""
    with MotoProcess() as moto:
        moto.client.create_bucket(Bucket="bench-spaced")
        s3 = {"uri": "s3://bench-spaced/table", "options": {**moto.options, "seo_server_side_copy": True}}
        r = history(batches=batches, files_per_batch=10, work=work / "spaced", time_box_s=900, interval_s=1.0, seed_live_files=live, s3=s3)
    comp = [ms for _, ms in r["compaction_ms"]]
    print(
        f"  s3 spaced: {r['live_files']:,} live files, compaction batches {['%.0f' % x for x in comp]} ms, "
        f"other batches median {r['other_batches_ms']['median']:.1f} ms",
        flush=True,
    )
    return {k: r[k] for k in ("batches", "live_files", "interval_s", "all_ms", "compaction_ms", "compaction_summary_ms", "other_batches_ms")}


def main(size: str = "small") -> dict[str, Any]:
    cfg = {
        "small": dict(
            overhead=500,
            history=5_000,
            box=120,
            recovery=[100, 1000, 5000],
            spaced=30,
            seed=100_000,
            live=[100, 100_000],
            seeded=100,
            s3_live=[100, 100_000],
            s3_batches=50,
        ),
        "full": dict(
            overhead=2_000,
            history=100_000,
            box=180,
            recovery=[100, 1000, 10_000],
            spaced=60,
            seed=1_000_000,
            live=[100, 250_000, 1_000_000],
            seeded=300,
            s3_live=[100, 250_000, 1_000_000],
            s3_batches=100,
        ),
    }[size]
    work = Path(tempfile.mkdtemp(prefix="seo-bench-commit-"))
    try:
        result = {"overhead": overhead(batches=cfg["overhead"], files_per_batch=10, work=work)}
        total = result["overhead"]["total_ms"]
        print(f"  commit overhead (10 files/batch): median {total['median']:.2f} ms, p99 {total['p99']:.2f} ms", flush=True)
        from .bench_observability import main as observability

        result["observability"] = observability(batches=cfg["overhead"])  # the metrics and lineage hooks per batch
        result["seeded"] = seeded(live=cfg["live"], batches=cfg["seeded"], work=work)
        result["seeded_s3"] = seeded_s3(live=cfg["s3_live"], batches=cfg["s3_batches"], work=work / "s3")
        result["spaced_s3"] = spaced_s3(live=cfg["s3_live"][-1], batches=cfg["spaced"], work=work / "s3")
        result["history"] = history(batches=cfg["history"], files_per_batch=10, work=work, time_box_s=cfg["box"])
        h = result["history"]
        print(
            f"  history: {h['batches']:,} batches, {h['live_files']:,} live files: "
            f"p99 {h['first_window_ms']['p99']:.1f} ms -> {h['last_window_ms']['p99']:.1f} ms",
            flush=True,
        )
        if cfg["spaced"]:
            # a table with 1M live files, batches 1 s apart (a realistic trigger): the compaction
            # is prepared in the background; without preparation every 10th batch copies it all
            for prepare in (True, False):
                key = "spaced_prepared" if prepare else "spaced_unprepared"
                result[key] = history(
                    batches=cfg["spaced"], files_per_batch=10, work=work, time_box_s=900, interval_s=1.0, seed_live_files=cfg["seed"], prepare=prepare
                )
                r = result[key]
                comp = [ms for _, ms in r["compaction_ms"]]
                print(
                    f"  {key}: {r['live_files']:,} live files, compaction batches {['%.0f' % x for x in comp]} ms, "
                    f"other batches p99 {r['other_batches_ms']['p99']:.1f} ms",
                    flush=True,
                )
        result["recovery"] = recovery(histories=cfg["recovery"], work=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    out = main(sys.argv[1] if len(sys.argv) > 1 else "small")
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/commit.json").write_text(json.dumps(out, indent=1))
