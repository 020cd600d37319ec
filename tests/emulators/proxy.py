"""A small HTTP proxy on 127.0.0.1 in front of a real emulator, to make it misbehave in one
precise way (drop a precondition, refuse a token) while every request still goes through the
real SDK and the real server. It also records each request (method, path with query, headers).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

#: (method, path, headers) -> (path, headers) to forward
Rewrite = Callable[[str, str, dict], tuple[str, dict]]
#: (method, path, headers) -> (status, JSON body) to answer instead of forwarding, or None
Answer = Callable[[str, str, dict], "tuple[int, bytes] | None"]


class HttpProxy:
    def __init__(self, upstream: str, *, rewrite: Rewrite | None = None, answer: Answer | None = None) -> None:
        target = urlsplit(upstream)
        self.seen: list[tuple[str, str, dict]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                headers = {k: v for k, v in self.headers.items()}
                length = int(headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                proxy.seen.append((self.command, self.path, headers))
                canned = answer(self.command, self.path, headers) if answer else None
                if canned is not None:
                    status, payload = canned
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                path = self.path
                if rewrite:
                    path, headers = rewrite(self.command, path, dict(headers))
                headers.pop("Expect", None)
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                try:
                    conn.request(self.command, path, body=body, headers=headers)
                    resp = conn.getresponse()
                    payload = resp.read()
                    self.send_response(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("transfer-encoding", "content-length", "connection", "server", "date"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HttpProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
