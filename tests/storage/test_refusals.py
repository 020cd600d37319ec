"""What a disk refuses is the table's problem, said so: a read-only mount, missing permissions or a
table path that is a file give one ``StorageAccessError`` naming the table and the cause - from
``sink.open()``, the writer and every ``seo`` command that writes - never a bare ``OSError`` or a
CLI line calling it a bug. Real refusals: a read-only bind mount (``EROFS``) and a user without
write permission (``EACCES``); root ignores permission bits, so that case runs as ``nobody``."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.errors import StorageAccessError
from streaming_exactly_once.storage import open_storage
from tests.cli.test_cli import Q, seo
from tests.commit.helpers import make_committer, stage_and_commit

REPO = Path(__file__).resolve().parents[2]


def _table(path: Path) -> Path:
    committer = make_committer(open_storage(str(path)), compact_interval=3)
    for batch in range(4):
        stage_and_commit(committer, Q, batch, [batch * 2, batch * 2 + 1])
    committer.close()
    return path


@contextlib.contextmanager
def read_only_view(source: Path):
    """``source`` seen through a read-only bind mount: writes there fail with ``EROFS``, for root
    too. Skips where this process may not mount (not root, no ``CAP_SYS_ADMIN``)."""
    view = Path(tempfile.mkdtemp(prefix="seo-ro-"))
    mounted = subprocess.run(["mount", "--bind", str(source), str(view)], capture_output=True)
    if mounted.returncode != 0:
        view.rmdir()
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True, capture_output=True)
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)
        view.rmdir()


@pytest.fixture
def read_only_table(tmp_path):
    with read_only_view(_table(tmp_path / "src").parent) as view:
        yield view / "src"


@pytest.mark.parametrize("command", [["gc"], ["recover"], ["compact", "--min-files", "2", "--min-age", "0s"], ["recover", "--rebuild-logs"]])
def test_a_command_that_writes_a_read_only_table_says_so_and_calls_it_no_bug(capsys, read_only_table, command):
    code, out, err = seo(capsys, command[0], str(read_only_table), *command[1:])
    assert code == 1, out + err
    assert f"Cannot write to table file://{read_only_table}: read-only file system" in err, err
    assert "bug" not in err and "unexpected" not in err and "OSError" not in err


def test_what_only_reads_works_on_a_read_only_table(capsys, read_only_table):
    for command in (["status"], ["verify"], ["gc", "--dry-run"], ["files"], ["compact", "--dry-run", "--min-files", "2", "--min-age", "0s"]):
        code, out, err = seo(capsys, command[0], str(read_only_table), *command[1:])
        assert code == 0, (command, out, err)


def test_sink_open_on_a_read_only_table_is_a_storage_access_error_naming_it(read_only_table):
    sink = ExactlyOnceSink(str(read_only_table))
    with pytest.raises(StorageAccessError) as caught:
        sink.open()
    err = caught.value
    assert err.reason == "read-only" and err.table == f"file://{read_only_table}"
    assert str(err).startswith(f"Cannot write to table file://{read_only_table}: read-only file system")
    assert "Mount it read-write" in str(err)


def test_a_table_path_that_is_a_file_is_refused_by_the_sink_before_anything_is_written(tmp_path):
    csv = tmp_path / "events-0.csv"
    csv.write_text("id\n1\n")
    with pytest.raises(StorageAccessError) as caught:
        ExactlyOnceSink(str(csv))
    assert caught.value.reason == "not-a-directory" and not isinstance(caught.value, NotADirectoryError)
    assert f"Cannot write to table file://{csv}: it is a file, not a directory" in str(caught.value)
    assert csv.read_text() == "id\n1\n"


def test_a_writer_under_a_file_names_the_file(tmp_path):
    (tmp_path / "data").write_text("x")
    committer = make_committer(open_storage(str(tmp_path / "data" / "t")))
    with pytest.raises(StorageAccessError) as caught:
        committer.open()
    assert caught.value.reason == "not-a-directory"
    assert f"t: file://{tmp_path}/data is a file, not a directory. A table is a directory" in str(caught.value)


def _without_permission_bypass() -> list[str]:
    """The command prefix under which permission bits bind this process: none for a user, for
    root one without the capabilities that ignore them (``setpriv``, util-linux)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root ignores permission bits and setpriv is not installed to drop that")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


def test_permission_denied_names_the_table_and_the_cause(tmp_path):
    """A table its user may read but not write: every directory r-x, every file r--."""
    table = _table(tmp_path / "t")
    for path in [*table.rglob("*"), table]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    script = "import sys\nfrom streaming_exactly_once.cli.main import main\nmain(sys.argv[1:])\n"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        run = [*_without_permission_bypass(), sys.executable, "-c", script]
        done = subprocess.run([*run, "gc", str(table)], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"Cannot write to table file://{table}: permission denied" in done.stderr, done.stderr
        assert "write access" in done.stderr and "bug" not in done.stderr
        done = subprocess.run([*run, "verify", str(table)], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        for path in [table, *table.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
