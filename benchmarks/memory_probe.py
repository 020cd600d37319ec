"""Peak RSS of the commit process, the reader index build and ``read.files`` at N live files (#14, memory).

    python -m benchmarks.memory_probe [--entries 1000000] [--only read-index]

Each measurement runs in a fresh process (peak RSS is per process): the manifest is seeded with
N live files (``bench_commit.seed_manifest``), then

* ``index``: ``write_index`` of the compact file alone;
* ``prepared`` / ``unprepared``: 12 back-to-back batches of 10 files through the committer, one
  of them a compaction, with the next compact file prepared in the background or not (the
  index is built after the compaction, as the sink does);
* ``spaced``: 30 batches of 10 files 1 s apart (a realistic trigger), prepared: three
  compactions, each followed by the background index build and the copy for the next one;
* ``read-index`` / ``read-json``: ``read.files`` of the table, with the compact file's Parquet
  index (built beforehand in another process, so its memory is not counted) or without one.

Prints one line per measurement: peak RSS in MB, and seconds.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measure(what: str, entries: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="seo-memory-"))
    try:
        _measure_in(what, entries, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # a 1M-entry compact file is 230 MB


def _measure_in(what: str, entries: int, work: Path) -> None:
    from benchmarks.bench_commit import history, seed_manifest

    t0 = time.perf_counter()
    if what in ("read-index", "read-json"):
        _measure_read(work / "t", entries, index=what == "read-index")
        return
    if what == "index":
        from streaming_exactly_once.manifest.manifest_index import write_index
        from streaming_exactly_once.manifest.manifest_log import ManifestLog
        from streaming_exactly_once.storage import open_storage

        seed_manifest(work / "t", entries, index=False)
        storage = open_storage(str(work / "t"))
        log = ManifestLog(storage)
        before = _peak_mb()
        t0 = time.perf_counter()
        write_index(storage, max(log.list_batch_ids()), log)
        print(f"index build: peak RSS {_peak_mb():.0f} MB (after seeding {before:.0f} MB), {time.perf_counter() - t0:.2f} s")
        return
    spaced = what == "spaced"
    result = history(
        batches=30 if spaced else 12,
        files_per_batch=10,
        work=work,
        time_box_s=600,
        interval_s=1.0 if spaced else 0.0,
        seed_live_files=entries,
        prepare=what != "unprepared",
    )
    compaction = ", ".join(f"{ms:.0f} ms" for _, ms in result["compaction_ms"])
    name = "spaced 1 s, prepared" if spaced else what
    print(f"commit, {name} compaction: peak RSS {result['peak_rss_mb']:.0f} MB, compaction batch {compaction}, {time.perf_counter() - t0:.1f} s")


def _measure_read(table: Path, entries: int, *, index: bool) -> None:
    """``read.files`` in this process; the seeding streams lines to disk and the index is built
    by a child process, so the peak measured is the read's."""
    from benchmarks.bench_commit import seed_manifest

    seed_manifest(table, entries, index=index)  # the index built by a child process
    import pyarrow.compute
    import pyarrow.json
    import pyarrow.parquet  # noqa: F401  (imported before the clock starts: the read, not the imports, is timed)

    from streaming_exactly_once import read

    before = _peak_mb()
    t0 = time.perf_counter()
    files = read.files(str(table))
    seconds = time.perf_counter() - t0
    assert len(files) == entries, len(files)
    source = "index" if index else "JSON"
    print(f"read.files ({source}): peak RSS {_peak_mb():.0f} MB (before reading {before:.0f} MB), {seconds:.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--only", choices=["index", "prepared", "unprepared", "spaced", "read-index", "read-json"])
    args = parser.parse_args(argv)
    if args.only:
        _measure(args.only, args.entries)
        return 0
    print(f"{args.entries:,} live files", flush=True)
    for what in ("index", "prepared", "unprepared", "spaced", "read-index", "read-json"):
        cmd = [sys.executable, "-m", "benchmarks.memory_probe", "--entries", str(args.entries), "--only", what]
        subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
