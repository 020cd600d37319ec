"""A maintenance command run right after a query ended waits for its writer to let go.

A sink releases its table when Spark's listener bus says the query ended, which may come a
moment after ``awaitTermination`` returned to the user's script. ``seo gc``, ``recover`` and
``compact`` run then wait for the release (up to ``ENDING_WRITER_WAIT_S``) instead of refusing
with "being written by"; a writer that stays is still refused, after the wait.
"""

from __future__ import annotations

import threading
import time

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.protocol.lease import ENDING_WRITER_WAIT_S, Lease, read_lease_state
from streaming_exactly_once.errors import ConcurrentWriterError
from streaming_exactly_once.maintenance.gc import collect_garbage
from streaming_exactly_once.storage import open_storage
from tests.cli.test_cli import seo
from tests.readers.tables import write_group, write_table


def ending_writer(root) -> Lease:
    """A live writer of ``root`` that lets go a second from now, as a sink told its query ended."""
    lease = Lease(open_storage(str(root)), description="a query that just ended")
    lease.acquire()
    lease.start_heartbeat()
    threading.Timer(1.0, lease.release).start()
    return lease


@pytest.mark.parametrize("command", [["gc"], ["recover"], ["compact"], ["gc", "--older-than", "0s"]])
def test_a_command_run_as_a_query_ends_waits_for_its_writer_to_let_go(tmp_path, capsys, command):
    root = tmp_path / "t"
    rows = write_table(str(root), batches=3)
    ending_writer(root)
    code, out, err = seo(capsys, *command, str(root))
    assert code == 0, err
    assert read_lease_state(open_storage(str(root))).writer.description.startswith("seo")  # the command took the table
    assert sorted(read.arrow(str(root)).column("id").to_pylist()) == sorted(rows)


def test_a_groups_recover_waits_too(tmp_path, capsys):
    root = tmp_path / "lake"
    write_group(str(root), {"orders": [1, 2], "payments": [3]})
    ending_writer(root)
    code, out, err = seo(capsys, "recover", str(root))
    assert code == 0, err


def test_a_writer_that_stays_is_refused_after_the_wait(tmp_path):
    root = tmp_path / "t"
    write_table(str(root))
    lease = Lease(open_storage(str(root)), description="a running query")
    lease.acquire()
    lease.start_heartbeat()
    t0 = time.monotonic()
    try:
        with pytest.raises(ConcurrentWriterError, match="being written by writer .*a running query"):
            collect_garbage(open_storage(str(root)))
    finally:
        lease.release()
    assert time.monotonic() - t0 >= ENDING_WRITER_WAIT_S
