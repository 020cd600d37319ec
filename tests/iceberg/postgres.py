"""A real PostgreSQL server for the SQL-catalog tests: initdb into a temp dir, pg_ctl on a free port.

The binaries come from Debian's ``postgresql`` package (``/usr/lib/postgresql/<v>/bin``, or on
PATH). PostgreSQL refuses to run as root, so as root the server runs as ``nobody`` (through
``runuser``) in a directory it owns; listening on 127.0.0.1 only, trust authentication, fsync on
(the concurrency tests rely on the server's real commit path). ``start`` returns None with the
reason where no server can be had; the fixtures skip with it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass


@dataclass
class Server:
    port: int
    directory: str
    bindir: str
    as_user: list[str]

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        subprocess.run(
            [*self.as_user, f"{self.bindir}/pg_ctl", "-D", f"{self.directory}/data", "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.directory, ignore_errors=True)


def bindir() -> str | None:
    found = shutil.which("initdb")
    if found and os.path.exists(os.path.join(os.path.dirname(os.path.realpath(found)), "pg_ctl")):
        return os.path.dirname(os.path.realpath(found))
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(candidates[-1]) if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start() -> Server | str:
    """A running server, or why there is none."""
    bins = bindir()
    if bins is None:
        return "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin): apt-get install -y postgresql"
    directory = tempfile.mkdtemp(prefix="seo-pg-", dir="/tmp")
    as_user: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            return "running as root without runuser: PostgreSQL refuses to run as root"
        as_user = [runuser, "-u", "nobody", "--"]
        os.chmod(directory, 0o755)
        shutil.chown(directory, "nobody", "nogroup")
    data = f"{directory}/data"
    init = subprocess.run(
        [*as_user, f"{bins}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if init.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        return f"initdb failed: {init.stderr.strip()[-300:]}"
    for _ in range(3):  # a free port can be taken between the probe and the server's bind
        port = _free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {directory} -c max_connections=50"
        started = subprocess.run(
            [*as_user, f"{bins}/pg_ctl", "-D", data, "-o", options, "-l", f"{directory}/log", "-w", "-t", "60", "start"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        if started.returncode == 0:
            server = Server(port, directory, bins, as_user)
            if _ready(port):
                return server
            server.stop()
            return "PostgreSQL started but does not accept connections on 127.0.0.1"
        time.sleep(0.2)
    log = open(f"{directory}/log").read()[-300:] if os.path.exists(f"{directory}/log") else ""
    shutil.rmtree(directory, ignore_errors=True)
    return f"pg_ctl start failed: {started.stderr.strip()[-200:]} {log}"


def _ready(port: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False
