"""A ledger provider over loopback HTTP, in the test process, that counts requests.

``/refunds`` is not idempotent: every request it accepts makes a new refund, so a
write sent twice shows as two. ``/entries`` deduplicates by ``Idempotency-Key``.
A test can script the next answers of a path, or hold its next request (counted,
its effect applied) until released, which is where a crash test kills a host.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_HOLD_SECONDS = 120.0


@dataclass(frozen=True)
class Request:
    """One request the provider received."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: Any

    @property
    def call_id(self) -> str | None:
        return self.headers.get("x-call-id")

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("idempotency-key")


@dataclass(frozen=True)
class Answer:
    """A scripted answer."""

    status: int
    body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


class Provider:
    """The ledger provider; ``url`` is its base URL on 127.0.0.1."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self.refunds: list[dict[str, Any]] = []
        self.entries: dict[str, dict[str, Any]] = {}
        self._scripts: dict[str, list[Answer]] = {}
        self._holds: dict[str, threading.Event] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        for event in list(self._holds.values()):
            event.set()
        self._server.shutdown()
        self._server.server_close()

    def script(self, path: str, *answers: Answer) -> None:
        """Answer the next requests to ``path`` with ``answers``, in order."""
        with self._lock:
            self._scripts.setdefault(path, []).extend(answers)

    def hold(self, path: str) -> threading.Event:
        """Hold the next request to ``path`` after counting it; set the event to answer."""
        event = threading.Event()
        with self._lock:
            self._holds[path] = event
        return event

    def to(self, path: str) -> list[Request]:
        """The requests to ``path``, in order."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # -- serving ---------------------------------------------------------------------

    def _receive(self, request: Request) -> tuple[Answer, threading.Event | None]:
        with self._lock:
            self.requests.append(request)
            hold = self._holds.pop(request.path, None)
            script = self._scripts.get(request.path)
            if script:
                return script.pop(0), hold
            return self._effect(request), hold

    def _effect(self, request: Request) -> Answer:
        body = request.body if isinstance(request.body, dict) else {}
        if request.path == "/balance":
            return Answer(200, {"account": request.query.get("account"), "balance": 120})
        if request.path == "/stories":
            count = int(request.query.get("count", "0"))
            return Answer(200, {"ids": [f"story-{n:05d}" for n in range(count)]})
        if request.path == "/refunds":
            refund = {"refundId": f"re_{len(self.refunds) + 1}", **body}
            self.refunds.append(refund)
            return Answer(200, refund)
        if request.path == "/entries":
            key = request.idempotency_key or ""
            if key not in self.entries:
                self.entries[key] = {"entryId": f"en_{len(self.entries) + 1}", **body}
            return Answer(200, self.entries[key])
        if request.path == "/receipts":
            return Answer(200, {"receiptId": f"rc_{len(self.requests)}", **body})
        return Answer(404, {"message": f"no route {request.path}"})


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            request = Request(
                method=self.command,
                path=url.path,
                query={key: values[-1] for key, values in parse_qs(url.query).items()},
                headers={key.lower(): value for key, value in self.headers.items()},
                body=json.loads(raw) if raw else None,
            )
            answer, hold = provider._receive(request)
            if hold is not None:
                hold.wait(_HOLD_SECONDS)
            data = json.dumps(dict(answer.body)).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the caller is gone (a killed worker)

        do_GET = _serve
        do_POST = _serve

    return Handler
