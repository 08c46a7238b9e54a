"""An HTTP proxy in front of the moto S3 server that injects S3 answers moto never gives.

Real HTTP on loopback: the store under test talks to the proxy exactly as it
would to S3, and the proxy forwards to moto unless told to answer a
conditional upload (``If-None-Match: *``) itself with 409 ConditionalRequestConflict
or 501 NotImplemented, as a service without conditional writes does.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import urlsplit

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "expect",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
}


@dataclass(frozen=True, kw_only=True)
class SeenRequest:
    method: str
    path: str
    conditional: bool


def _error_body(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()


class S3FaultProxy:
    """Forwards to ``upstream``; answers conditional PUTs itself when told to."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._lock = threading.Lock()
        self.conflicts_left = 0
        self.refuse_conditional_writes = False
        self.requests: list[SeenRequest] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version: ClassVar[str] = "S3FaultProxy"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                conditional = self.headers.get("If-None-Match") == "*"
                with proxy._lock:
                    proxy.requests.append(
                        SeenRequest(method=self.command, path=self.path, conditional=conditional)
                    )
                    fault = None
                    if self.command == "PUT" and conditional:
                        if proxy.refuse_conditional_writes:
                            fault = (501, "NotImplemented", "If-None-Match is not implemented")
                        elif proxy.conflicts_left > 0:
                            proxy.conflicts_left -= 1
                            fault = (409, "ConditionalRequestConflict", "A conflicting write")
                if fault is not None:
                    status, code, message = fault
                    payload = _error_body(code, message)
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self._forward(body)

            def _forward(self, body: bytes) -> None:
                headers = {
                    name: value
                    for name, value in self.headers.items()
                    if name.lower() not in _HOP_BY_HOP
                }
                connection = http.client.HTTPConnection(*proxy._upstream, timeout=30)
                try:
                    connection.request(self.command, self.path, body=body, headers=headers)
                    response = connection.getresponse()
                    payload = response.read()
                    self.send_response(response.status, response.reason)
                    for name, value in response.getheaders():
                        if name.lower() in _HOP_BY_HOP or name.lower() == "content-length":
                            continue
                        self.send_header(name, value)
                    if self.command == "HEAD":
                        self.send_header(
                            "Content-Length", response.getheader("Content-Length") or "0"
                        )
                    else:
                        self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                finally:
                    connection.close()

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _relay

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def seen(self, method: str) -> list[SeenRequest]:
        with self._lock:
            return [request for request in self.requests if request.method == method]

    def __enter__(self) -> S3FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
