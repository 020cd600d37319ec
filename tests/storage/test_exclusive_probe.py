"""``Storage.check_exclusive_create``: an S3 endpoint must prove that ``If-None-Match: *`` works.

The broken endpoint is real: a small HTTP proxy on 127.0.0.1 in front of moto's S3 server that
drops the ``If-None-Match`` header from every request, as an S3-compatible store that ignores
conditional writes does. Every request goes over HTTP through botocore and s3fs unchanged.
"""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from streaming_exactly_once.errors import ExactlyOnceError, UnsupportedStorageError
from streaming_exactly_once.storage import open_storage

PROBE_DIR = "_seo/probe"


class S3Proxy:
    """Forwards every request to ``upstream``; drops ``If-None-Match`` if ``strip`` is set (only
    from requests of the methods in ``strip_methods``, if given) and counts requests per method
    (so a test can see whether a probe was sent at all), keeping each method and path;
    ``on_request(method, path)`` runs before a request is forwarded."""

    def __init__(
        self, upstream: str, *, strip: bool, strip_methods: tuple[str, ...] | None = None, on_request: Callable[[str, str], None] | None = None
    ) -> None:
        target = urlsplit(upstream)
        self.requests: Counter = Counter()
        self.sent: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue as botocore expects

            def _forward(self) -> None:
                proxy.requests[self.command] += 1
                proxy.sent.append((self.command, self.path))
                if on_request is not None:  # a test's hook: it may hold the request back
                    on_request(self.command, self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                stripping = strip and (strip_methods is None or self.command in strip_methods)
                headers = {k: v for k, v in self.headers.items() if not (stripping and k.lower() == "if-none-match")}
                headers.pop("Expect", None)
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    payload = resp.read()
                    self.send_response(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("transfer-encoding", "content-length", "connection", "server", "date"):
                            self.send_header(k, v)
                    # a HEAD answer has no body but the object's length (which s3fs reads as its size)
                    length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(payload))
                    self.send_header("Content-Length", length)
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

            def log_message(self, *args) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> S3Proxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def through(proxy: S3Proxy, bucket: str, s3_options: dict):
    return open_storage(f"s3://{bucket}/root", {**s3_options, "endpoint_url": proxy.url})


def test_an_endpoint_that_honours_if_none_match_passes_once_per_process(moto_endpoint, s3_bucket, s3_options):
    with S3Proxy(moto_endpoint, strip=False) as proxy:
        storage = through(proxy, s3_bucket, s3_options)
        storage.check_exclusive_create(PROBE_DIR)
        whole_puts = [p for m, p in proxy.sent if m == "PUT" and "uploadId" not in p]
        assert len(whole_puts) == 2, "the probe creates one object twice"
        assert storage.list_dir(PROBE_DIR) == [], "the probe object was not deleted"
        before = sum(proxy.requests.values())
        through(proxy, s3_bucket, s3_options).child("other").check_exclusive_create(PROBE_DIR)
        assert sum(proxy.requests.values()) == before, "the answer is cached per endpoint and bucket"


def test_an_endpoint_that_ignores_if_none_match_is_refused(moto_endpoint, s3_bucket, s3_options):
    with S3Proxy(moto_endpoint, strip=True) as proxy:
        storage = through(proxy, s3_bucket, s3_options)
        # the hazard itself: without the header every "create if absent" wins
        storage.put_if_absent("x", b"1")
        storage.put_if_absent("x", b"2")
        assert storage.read_bytes("x") == b"2"
        with pytest.raises(UnsupportedStorageError) as caught:
            storage.check_exclusive_create(PROBE_DIR)
        message = str(caught.value)
        assert proxy.url in message and s3_bucket in message and "If-None-Match" in message
        assert isinstance(caught.value, ExactlyOnceError) and caught.value.endpoint == proxy.url
        assert storage.list_dir(PROBE_DIR) == [], "the probe object was not deleted"
        puts = proxy.requests["PUT"]
        with pytest.raises(UnsupportedStorageError):
            storage.check_exclusive_create(PROBE_DIR)
        assert proxy.requests["PUT"] == puts, "the refusal is cached too: no second probe"
    # the same bucket straight on moto (another endpoint) is fine
    open_storage(f"s3://{s3_bucket}/root", s3_options).check_exclusive_create(PROBE_DIR)


def test_local_and_memory_storage_need_no_probe(local_storage, memory_storage):
    for storage in (local_storage, memory_storage):
        storage.check_exclusive_create(PROBE_DIR)
        assert storage.list_dir(PROBE_DIR) == []
