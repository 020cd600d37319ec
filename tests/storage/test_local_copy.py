"""Local disk: ranges of files copied by the kernel, the buffered fallback, and crashes mid-copy.

Real files only. The fallback is reached the way production reaches it: ``copy_file_range``
between two filesystems (``/dev/shm`` is tmpfs here) answers EXDEV."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming_exactly_once.errors import ComposedSourceError
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.storage.base import ByteRange
from streaming_exactly_once.storage.local import copy_range

PAYLOAD = bytes(range(256)) * 20_000 + b"tail"  # ~5 MB, not a multiple of any block size


def _copy(src: Path, dst: Path, offset: int, length: int, dst_offset: int, **kw) -> bool:
    s = os.open(src, os.O_RDONLY)
    d = os.open(dst, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        return copy_range(s, d, offset, length, dst_offset, **kw)
    finally:
        os.close(s)
        os.close(d)


@pytest.mark.parametrize("offset,length", [(0, len(PAYLOAD)), (3, len(PAYLOAD) - 7), (4096, 1), (17, 0)])
def test_kernel_and_buffered_copies_give_the_same_bytes(tmp_path, offset, length):
    src = tmp_path / "src"
    src.write_bytes(PAYLOAD)
    (tmp_path / "k").write_bytes(b"head")
    (tmp_path / "b").write_bytes(b"head")
    assert _copy(src, tmp_path / "k", offset, length, 4) is True
    assert _copy(src, tmp_path / "b", offset, length, 4, kernel=False) is False
    expected = b"head" + PAYLOAD[offset : offset + length]
    assert (tmp_path / "k").read_bytes() == expected == (tmp_path / "b").read_bytes()


def test_another_filesystem_falls_back_to_the_buffered_copy(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the temporary directory")
    src = shm / f"seo-copy-{os.getpid()}"
    src.write_bytes(PAYLOAD)
    try:
        assert _copy(src, tmp_path / "dst", 1, len(PAYLOAD) - 1, 0) is False  # EXDEV: buffered
    finally:
        src.unlink()
    assert (tmp_path / "dst").read_bytes() == PAYLOAD[1:]


def test_a_short_source_is_an_error_not_a_short_file(tmp_path):
    src = tmp_path / "src"
    src.write_bytes(b"0123456789")
    for kernel in (True, False):
        with pytest.raises(ComposedSourceError, match="short of the range"):
            _copy(src, tmp_path / f"dst-{kernel}", 4, 7, 0, kernel=kernel)


def test_composed_file_has_the_mode_and_durability_of_put_if_absent(tmp_path):
    storage = open_storage(str(tmp_path / "root"))
    storage.put_if_absent("d/src", PAYLOAD)
    storage.put_composed_if_absent("d/new/composed", [b"v1", ByteRange("d/src", 2, 1000)])
    storage.put_if_absent("d/new/plain", b"v1" + PAYLOAD[2:1002])
    root = tmp_path / "root" / "d" / "new"
    assert (root / "composed").read_bytes() == (root / "plain").read_bytes()
    assert (root / "composed").stat().st_mode == (root / "plain").stat().st_mode
    assert sorted(p.name for p in root.iterdir()) == ["composed", "plain"]  # no temp file left


_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.storage.base import ByteRange
storage = open_storage({root!r})
storage.put_composed_if_absent("log/9.compact", [ByteRange("log/big", 0, {size}), b"\\n{{}}"])
print("done")
"""


def test_a_process_killed_mid_copy_leaves_no_final_file(tmp_path):
    """The crash window: killed while the kernel copies (or fsyncs) into the temp file, the
    writer leaves at most a hidden temp file - never ``9.compact`` - and a later writer
    creates the file normally."""
    root = tmp_path / "root"
    (root / "log").mkdir(parents=True)
    size = 512 << 20  # sparse: costs no disk, but copying and syncing it takes a while
    with open(root / "log" / "big", "wb") as fh:
        fh.truncate(size)
    repo = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen([sys.executable, "-c", _CHILD.format(repo=repo, root=str(root), size=size)], stdout=subprocess.PIPE)
    deadline = time.time() + 30
    while not any(p.name.endswith(".tmp") for p in (root / "log").iterdir()):
        assert child.poll() is None and time.time() < deadline, "the child ended before its copy was seen"
        time.sleep(0.001)
    child.send_signal(signal.SIGKILL)
    child.wait()
    names = sorted(p.name for p in (root / "log").iterdir())
    assert "9.compact" not in names
    assert all(n == "big" or (n.startswith(".9.compact.") and n.endswith(".tmp")) for n in names)
    storage = open_storage(str(root))
    storage.put_composed_if_absent("log/9.compact", [ByteRange("log/big", size - 3, 3), b"\n{}"])
    assert storage.read_bytes("log/9.compact") == b"\0\0\0\n{}"
