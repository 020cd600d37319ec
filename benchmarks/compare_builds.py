"""Two builds of the library side by side: the commit path and the readers, interleaved rounds.

    python benchmarks/compare_builds.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 6] [--batches 300]

Each round runs every measurement once per build, in alternating order, each in a fresh process
whose ``PYTHONPATH`` picks the build (so neither warms the other's caches); the report gives
each build's median over rounds and the ratio new / old. The commit measurement is the
``rename``-mode commit of 10 staged files (``TableCommitter.commit``, no Spark), median per
batch; the readers' is ``read.arrow`` and ``read.files`` of a table of 2,000 committed files.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERY = "13131313-1313-1313-1313-131313131313"


def _commit_child(batches: int) -> dict[str, float]:
    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile, TableCommitter
    from streaming_exactly_once.storage import open_storage

    work = Path(tempfile.mkdtemp(prefix="seo-compare-"))
    try:
        storage = open_storage(str(work / "t"))
        committer = TableCommitter(storage, CommitterOptions(heartbeat=False))
        committer.open()
        times = []
        for n in range(batches):
            attempt = committer.begin(QUERY, n, mode="rename")
            files = []
            for i in range(10):
                rel = f"day={i % 4}/part-{i:05d}-{n:08d}.parquet"
                staged = f"{attempt.staging_dir}/data/{rel}"
                path = work / "t" / staged
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"x" * 2048)
                files.append(StagedFile(final=rel, size=2048, mtime_ms=0, staged=staged))
            t0 = time.perf_counter()
            committer.commit(attempt, files, input_files=[InputFile(0, f"file:///in/{n}", 1)], num_rows=10)
            times.append((time.perf_counter() - t0) * 1000)
        committer.close()
        return {"commit_ms": statistics.median(times[10:])}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _readers_child(table: str) -> dict[str, float]:
    from streaming_exactly_once import read

    out = {}
    for name, fn in (("read_files_ms", lambda: read.files(table)), ("read_arrow_ms", lambda: read.arrow(table))):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = statistics.median(times)
    return out


def _make_reader_table(build: str, table: str) -> None:
    code = f"""
import io, pyarrow as pa, pyarrow.parquet as pq
from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile, TableCommitter
from streaming_exactly_once.storage import open_storage
storage = open_storage({table!r})
c = TableCommitter(storage, CommitterOptions(heartbeat=False))
c.open()
buf = io.BytesIO(); pq.write_table(pa.table({{"id": list(range(100))}}), buf); data = buf.getvalue()
for n in range(200):
    a = c.begin({QUERY!r}, n, mode="direct")
    files = []
    for i in range(10):
        rel = f"p={{i}}/part-{{n:05d}}-{{i}}.parquet"
        storage.put_if_absent(f"{{a.staging_dir}}/intents/{{n}}-{{i}}", rel.encode())
        storage.put_if_absent(rel, data)
        files.append(StagedFile(final=rel, size=len(data), mtime_ms=0))
    c.commit(a, files, input_files=[InputFile(0, f"file:///in/{{n}}", 1)], num_rows=1000)
c.close()
"""
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": build})


def _run(build: str, what: str, arg: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "child", what, arg], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": build}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    old, new = argv[0], argv[1]
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 6
    batches = argv[argv.index("--batches") + 1] if "--batches" in argv else "300"
    work = Path(tempfile.mkdtemp(prefix="seo-compare-tables-"))
    results: dict[str, dict[str, list[float]]] = {old: {}, new: {}}
    try:
        table = str(work / "readers")
        _make_reader_table(old, table)  # one table, written by the old build: both must read it
        for r in range(rounds):
            order = (old, new) if r % 2 == 0 else (new, old)
            for build in order:
                for what, arg in (("commit", batches), ("readers", table)):
                    for key, value in _run(build, what, arg).items():
                        results[build].setdefault(key, []).append(value)
        report = {}
        for key in results[new]:
            a, b = statistics.median(results[old][key]), statistics.median(results[new][key])
            report[key] = {"old": round(a, 3), "new": round(b, 3), "ratio": round(b / a, 3)}
            print(f"{key:16s} old {a:9.3f}  new {b:9.3f}  new/old {b / a:.3f}", flush=True)
        print(json.dumps({"old": old, "new": new, "rounds": rounds, "results": report}))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        what, arg = sys.argv[2], sys.argv[3]
        print(json.dumps(_commit_child(int(arg)) if what == "commit" else _readers_child(arg)))
    elif len(sys.argv) >= 3:
        sys.exit(main(sys.argv[1:]))
    else:
        sys.exit(__doc__)
