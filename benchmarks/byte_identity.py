"""Prove that two builds of the library write the same bytes: run one scripted history of tables
and dataset groups with deterministic clocks and ids, and hash every file they leave.

    python benchmarks/byte_identity.py run OUT.json        # with the library on sys.path
    python benchmarks/byte_identity.py compare A.json B.json

Run it as a script (not ``-m``) so that ``PYTHONPATH=<other checkout>`` decides which build is
imported: ``PYTHONPATH=/tmp/old python benchmarks/byte_identity.py run old.json``.

What is pinned: ``time.time`` (one fixed instant), ``time.perf_counter`` (step timings all 0),
``uuid.uuid4`` (a counter), the process's pid in lease files. What is left out: files delta-rs
writes (``_delta_log``; its own clock), and lease heartbeats (rewritten by time); the manifest
indexes (a reader's cache) are compared by their rows. The history:
single tables in rename and direct mode, a private manifest, a Delta table, a dataset group;
compactions and retention; a commit that fails after its WAL claim and is rolled forward; a
direct-mode attempt aborted before its claim.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

FIXED_S = 1_795_000_000.0
QUERY = "12345678-1234-1234-1234-123456789012"
SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'


def _pin_clocks_and_ids() -> None:
    counter = iter(range(1, 1 << 30))
    time.time = lambda: FIXED_S  # type: ignore[assignment]
    time.perf_counter = lambda: 0.0  # type: ignore[assignment]
    uuid.uuid4 = lambda: uuid.UUID(int=next(counter))  # type: ignore[assignment]


def _stage(storage: Any, attempt: Any, name: str, payload: bytes) -> Any:
    from streaming_exactly_once.commit.committer import StagedFile

    final = f"p=a/{name}"
    if attempt.mode == "rename":
        staged = f"{attempt.staging_dir}/data/{final}"
        storage.put_if_absent(staged, payload)
    else:
        storage.put_if_absent(f"{attempt.staging_dir}/intents/{name}", final.encode())
        storage.put_if_absent(final, payload)
        staged = None
    info = storage.info(staged or final)
    return StagedFile(final=final, size=info.size, mtime_ms=int(FIXED_S * 1000), staged=staged)


def _table_history(root: str, *, mode: str, **options: Any) -> None:
    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
    from streaming_exactly_once.storage import open_storage
    from streaming_exactly_once.testing.faults import InjectedFailure, with_faults

    opts = CommitterOptions(heartbeat=False, compact_interval=3, min_batches_to_retain=2, cleanup_delay_ms=0, **options)
    storage = open_storage(root)

    def batch(committer: TableCommitter, n: int) -> None:
        with committer.batch(QUERY, n, mode=mode) as attempt:
            committer.storage.makedirs(attempt.staging_dir)
            files = [_stage(committer.storage, attempt, f"part-{i}-{n:05d}.parquet", _parquet(n, i)) for i in range(2)]
            committer.commit(attempt, files, input_files=[InputFile(0, f"file:///in/{n}.csv", 1)], num_rows=4, schema=SCHEMA)
        committer.janitor.drain()

    first = TableCommitter(storage, opts)
    for n in range(7):
        batch(first, n)
    first.close()
    failing = TableCommitter(with_faults(storage, fail_at="after-wal"), opts)
    try:
        batch(failing, 7)
    except InjectedFailure:
        pass
    failing.lease.release()
    second = TableCommitter(storage, opts)
    second.open()  # rolls batch 7 forward
    for n in range(8, 10):
        batch(second, n)
    second.close()


def _parquet(batch: int, part: int) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"id": [batch * 10 + part * 2, batch * 10 + part * 2 + 1]}), sink)
    return sink.getvalue()


def _group_history(root: str) -> None:
    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter, MemberBatch
    from streaming_exactly_once.storage import open_storage

    group = GroupCommitter(open_storage(root), CommitterOptions(heartbeat=False, compact_interval=3, min_batches_to_retain=2, cleanup_delay_ms=0))
    for n in range(6):
        group.ensure_open()
        attempt = group.begin(QUERY, n, mode="rename")
        members = []
        for table in ("a", "b") if n % 2 == 0 else ("a",):
            staged = f"{attempt.staging_dir}/data/{table}/p=x/part-{n:05d}.parquet"
            group.storage.put_if_absent(staged, _parquet(n, 0))
            info = group.storage.info(staged)
            file = StagedFile(final=f"p=x/part-{n:05d}.parquet", size=info.size, mtime_ms=int(FIXED_S * 1000), staged=staged)
            members.append(MemberBatch(table=table, files=[file], rows=2, format="parquet"))
        group.commit_group(attempt, members, input_files=[InputFile(0, f"file:///in/g{n}.csv", 1)])
        group.janitor.drain()
    group.close()


def _normalise(rel: str, data: bytes) -> bytes:
    if "/_seo/manifest-index/" in rel:  # a reader's cache in Parquet: its rows, not its encoding
        import io

        import pyarrow.parquet as pq

        return json.dumps(pq.read_table(io.BytesIO(data)).to_pylist(), sort_keys=True, default=str).encode()
    if rel.startswith("_seo/epochs/") or "/_seo/epochs/" in rel:
        data = re.sub(rb'"pid":\d+', b'"pid":0', data)
        data = re.sub(rb'"pidStart":"\d+"', b'"pidStart":"0"', data)
    return data


def run(out: str) -> dict[str, str]:
    _pin_clocks_and_ids()
    import streaming_exactly_once

    work = Path(tempfile.gettempdir()) / "seo-byte-identity"  # one path: manifests hold absolute URIs
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        _table_history(str(work / "rename"), mode="rename")
        _table_history(str(work / "direct"), mode="direct")
        from streaming_exactly_once.delta.target import DeltaSettings

        _table_history(str(work / "delta-private"), mode="rename", delta=DeltaSettings(), spark_manifest=False)
        _group_history(str(work / "group"))
        hashes: dict[str, str] = {}
        for path in sorted(work.rglob("*")):
            rel = path.relative_to(work).as_posix()
            if path.is_dir() or "/_delta_log/" in rel or "/_seo/heartbeats/" in rel:
                continue
            hashes[rel] = hashlib.sha256(_normalise(rel, path.read_bytes())).hexdigest()
        result = {"library": os.path.dirname(streaming_exactly_once.__file__), "files": hashes}
        Path(out).write_text(json.dumps(result, indent=1, sort_keys=True))
        print(f"{len(hashes)} files hashed from {result['library']} -> {out}")
        return hashes
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(a: str, b: str) -> int:
    left, right = (json.loads(Path(p).read_text()) for p in (a, b))
    fa, fb = left["files"], right["files"]
    only_a, only_b = sorted(set(fa) - set(fb)), sorted(set(fb) - set(fa))
    differ = sorted(k for k in set(fa) & set(fb) if fa[k] != fb[k])
    print(f"{left['library']}: {len(fa)} files; {right['library']}: {len(fb)} files")
    for label, items in (("only in the first", only_a), ("only in the second", only_b), ("different bytes", differ)):
        if items:
            print(f"{label}: {len(items)}", *items[:20], sep="\n  ")
    same = not (only_a or only_b or differ)
    print("IDENTICAL" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        run(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
