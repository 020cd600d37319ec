"""A real Prometheus server for the tests: Debian's ``prometheus`` (``make prometheus`` installs
it), on 127.0.0.1 with a temporary config, storage and rule files; queried over its HTTP API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_MISSING = "Prometheus is not installed (Debian: apt-get install prometheus; `make prometheus` does it as root)"
PROMTOOL_MISSING = "promtool is not installed (it comes with Debian's prometheus package; `make prometheus`)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=promql)["result"])

    def wait_for(self, promql: str, check: Any, *, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll ``promql`` until ``check(result)`` holds; the last result otherwise (the caller asserts)."""
        deadline = time.monotonic() + timeout
        result = self.query(promql)
        while not check(result) and time.monotonic() < deadline:
            time.sleep(0.5)
            result = self.query(promql)
        return result

    def firing(self, alert: str) -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == alert and a["state"] == "firing"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_prometheus(work: Path, targets: list[str], *, rules: str | None = None, interval: str = "1s") -> Prometheus:
    """Prometheus scraping ``targets`` (``host:port``) every ``interval`` as job
    ``streaming-exactly-once``, evaluating ``rules`` (a rule file's text) as often."""
    binary = shutil.which("prometheus")
    assert binary is not None, PROMETHEUS_MISSING
    work.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [{"job_name": "streaming-exactly-once", "static_configs": [{"targets": targets}]}],
    }
    if rules is not None:
        (work / "rules.yml").write_text(rules)
        config["rule_files"] = [str(work / "rules.yml")]
    (work / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    log = work / "prometheus.log"
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"prometheus did not get ready: {log.read_text()[-3000:]}")
