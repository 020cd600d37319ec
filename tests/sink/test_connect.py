"""ExactlyOnceSink under Spark Connect (``pyspark[connect]``, a local server per client process).

The ``foreachBatch`` function runs in a Python worker of the server: the sink is pickled there
as configuration, builds its committer and lease in the worker at the first batch, and learns the
query id from the checkpoint. Each test's client is its own process (see
``tests.sink.connect_session``), so the server lives only as long as that test's client.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.commits_log import CommitsLog
from tests.datagen import write_csv_files
from tests.sink.conftest import REPO, assert_table_clean, run_driver

pytestmark = [pytest.mark.spark, pytest.mark.connect]


def _python_errors(stderr: str) -> str:
    """The Python side of a failed Connect run: its tracebacks and error lines, not the JVM's
    stack frames (which fill the tail of stderr)."""
    keep = [line for line in stderr.splitlines() if not line.lstrip().startswith("at ")]
    picked = [line for line in keep if "Traceback" in line or "Error" in line or "streaming_exactly_once" in line or line.startswith("  File")]
    return "\n".join(picked[-80:])


def _ids(table) -> Counter:
    return Counter(read.arrow(str(table), columns=["id"]).column("id").to_pylist())


def _assert_once(table, expected) -> None:
    counts = _ids(table)
    assert {i: c for i, c in counts.items() if c > 1} == {}, "duplicates"
    assert set(expected) - set(counts) == set(), "losses"
    assert set(counts) - set(expected) == set(), "unexpected rows"


@pytest.mark.parametrize("mode", [pytest.param("rename", marks=pytest.mark.long), "direct"])
def test_a_notebook_session_under_spark_connect(tmp_path, mode):
    """availableNow with a listener, stop + immediate restart with a new sink, a replayed batch,
    a lost checkpoint - all in one Connect session - and every row once."""
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.sink.connect_session", str(tmp_path / "in"), str(table), str(ckpt), "--mode", mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    steps = {s["step"]: s for s in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    assert proc.returncode == 0, proc.stdout[-1500:] + "\n" + _python_errors(proc.stderr)
    assert steps["session"]["type"] == "pyspark.sql.connect.session"
    committed = steps["metrics"]["batches"]
    assert [m["sparkBatchId"] for m in committed] == [0, 1]  # the listener saw both batches' figures
    assert sum(m["numRows"] for m in committed) == steps["metrics"]["ids"]
    assert all(m["numFiles"] >= 1 and m["observed"]["rows"] == m["numRows"] for m in committed)
    # each query's worker let the table go when its query ended (release or exit), never by
    # its lease running out: every new epoch began within the previous one's lease timeout
    epoch_dir, beat_dir = table / "_seo" / "epochs", table / "_seo" / "heartbeats"
    numbers = sorted(int(e.name) for e in epoch_dir.iterdir() if e.name.isdigit())
    for before, after in itertools.pairwise(numbers):
        if not (beat_dir / str(before)).exists():
            continue  # that writer never beat (it wrote nothing either)
        beat = json.loads((beat_dir / str(before)).read_text().splitlines()[1])
        began = json.loads((epoch_dir / str(after)).read_text().splitlines()[1])["startedMs"]
        history = {n.name: [(d / n.name).read_text() if (d / n.name).exists() else None for d in (epoch_dir, beat_dir)] for n in epoch_dir.iterdir()}
        assert began - beat["heartbeatMs"] < beat["timeoutMs"], (before, history, proc.stdout[-3000:], _python_errors(proc.stderr))
    _assert_once(table, steps["expected"]["ids"])
    assert_table_clean(table)
    # the lease was taken by the foreachBatch workers (one per query), never by the client
    records = CommitsLog(open_storage(str(table)), interval=10)
    assert len({r.query_id for r in records.latest_per_query().values()}) == 2  # the checkpoint was recreated once
    epochs = [json.loads((table / "_seo" / "epochs" / e).read_text().splitlines()[1]) for e in sorted((table / "_seo" / "epochs").iterdir())]
    assert steps["session"]["pid"] not in {e["pid"] for e in epochs}


@pytest.mark.long
def test_second_writer_and_kill_9_under_spark_connect(tmp_path):
    """A second Connect query on a live table fails at its first batch and commits nothing; a
    worker killed right after its manifest entry is rolled forward by the next query."""
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=5)
    table = tmp_path / "t"
    args = dict(input=tmp_path / "in", table=table, checkpoint=tmp_path / "ckpt", files_per_trigger=1, connect=True)
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.sink.driver",
            "--input",
            str(tmp_path / "in"),
            "--table",
            str(table),
            "--checkpoint",
            str(tmp_path / "ckpt"),
            "--files-per-trigger",
            "1",
            "--connect",
            "--continuous",
            "600",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        while not (table / "_seo" / "commits" / "0").exists():
            assert first.poll() is None, first.stdout.read()[-3000:]
            time.sleep(0.2)
        second = run_driver(
            tmp_path, input=tmp_path / "in", table=table, checkpoint=tmp_path / "other", connect=True, connect_handover_wait="5s"
        )  # a live writer, not one on its way out
        assert second.returncode == 3 and "CONCURRENT" in second.stdout, second.stdout[-2000:] + second.stderr[-2000:]
        assert first.poll() is None  # the first writer carries on
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the client, its local server and the server's worker
        first.wait()
    queries = {r.query_id for r in CommitsLog(open_storage(str(table)), interval=10).latest_per_query().values()}
    assert len(queries) == 1  # nothing of the second query was committed
    ids += write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5, start_file=6)
    crashed = run_driver(tmp_path, env_extra={"SEO_CRASH_AT": "after-manifest@2"}, **args)
    assert crashed.returncode != 0 and "Python worker exited unexpectedly" in crashed.stdout + crashed.stderr
    assert list((table / "_seo" / "wal").iterdir())  # killed inside the commit of its second batch
    done = run_driver(tmp_path, **args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    _assert_once(table, ids)
    assert_table_clean(table)
