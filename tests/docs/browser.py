"""One headless Chromium for every page a docs test opens, driven over the DevTools protocol.

A Chromium started per page (``--dump-dom``) costs about a second and a half of CPU before it
loads anything; the site tests open some sixty pages. This one is started once, with
``--remote-debugging-pipe``: it reads the protocol's commands from file descriptor 3 and writes
its answers and events to 4, each a JSON document ended by a NUL byte. ``dom(url, width)``
loads a page in a window that wide, waits for its ``load`` event (every script of the page has
run by then, the ``load`` listeners too) and returns the document as it is then.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from typing import Any

#: how long a page may take to load, and how long after its load event it may take to settle
LOAD_TIMEOUT_S = 60.0


class Browser:
    def __init__(self, chromium: str, flags: list[str], profile: str) -> None:
        to_browser, self._commands = os.pipe()
        self._answers, from_browser = os.pipe()

        def fds() -> None:  # the pipe's ends as descriptors 3 and 4 of the browser (either may be one now)
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
            for fd, number in zip(high, (3, 4), strict=True):
                os.dup2(fd, number)  # inheritable

        self._proc = subprocess.Popen(
            [chromium, *flags, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds,  # noqa: PLW1509 - only dup2 before exec
            close_fds=False,  # every other descriptor of this process is close-on-exec
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self._call("Page.enable", session=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in (self._commands, self._answers):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium went away (exit code {self._proc.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def _call(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False) -> dict[str, Any]:
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            command["sessionId"] = self._session
        os.write(self._commands, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            message = self._read(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def _wait_for(self, event: str) -> None:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        seen, self._events = self._events, []
        while not any(message.get("method") == event for message in seen):
            seen = [self._read(deadline)]

    def dom(self, url: str, width: int = 1280, height: int = 1200) -> str:
        """The page at ``url`` once loaded, in a window ``width`` x ``height``, as HTML."""
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self._call("Emulation.setDeviceMetricsOverride", metrics, session=True)
        self._events.clear()
        self._call("Page.navigate", {"url": url}, session=True)
        self._wait_for("Page.loadEventFired")
        done = self._call("Runtime.evaluate", {"expression": "document.documentElement.outerHTML", "returnByValue": True}, session=True)
        return str(done["result"]["value"])
