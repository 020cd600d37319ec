"""moto's S3 server on 127.0.0.1, with conditional writes arbitrated as AWS S3 arbitrates them.

moto answers ``If-None-Match: *`` (and ``If-Match``) by looking the key up and then storing the
object, in two steps, on a threaded server: two writers racing to create one key can both be told
200. AWS S3 decides a conditional write atomically (one 200, the rest 412), and the sink's
create-if-absent commit relies on exactly that. So the server used by the tests runs every
conditional request under one lock; unconditional requests stay concurrent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

_CONDITIONAL_HEADERS = ("HTTP_IF_NONE_MATCH", "HTTP_IF_MATCH")


class _ConditionalWritesInTurn:
    """WSGI middleware: a request carrying a write precondition runs alone among such requests."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        conditional = environ.get("REQUEST_METHOD") in ("PUT", "POST") and any(h in environ for h in _CONDITIONAL_HEADERS)
        if not conditional:
            return self._app(environ, start_response)
        with self._lock:
            return list(self._app(environ, start_response))  # the body too, before the next writer


class S3Server(ThreadedMotoServer):
    """``ThreadedMotoServer`` on 127.0.0.1, port 0, quiet, conditional writes arbitrated."""

    def __init__(self) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)

    def _server_entry(self) -> None:
        app = _ConditionalWritesInTurn(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    @property
    def endpoint(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"
