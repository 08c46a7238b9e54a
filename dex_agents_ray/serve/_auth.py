"""The inspector's gate: one token for every route, traded for an HttpOnly cookie, and
cross-site protection for every request that changes something.

- A request is let in with the cookie, with ``Authorization: Bearer <token>``, or
  with ``?token=<token>`` on a page, which answers a redirect to the same URL
  without the token and sets the cookie (``EventSource`` cannot send headers, so
  the page rides on the cookie, as Jupyter's does). Anything else gets 401.
- The cookie is ``HttpOnly; SameSite=Strict`` and holds a value derived from the
  token, not the token; its name is derived from the token too, so two
  inspectors on one host (cookies ignore ports) do not overwrite each other.
- ``SameSite`` does not separate ports of one host, so an unsafe method (POST...)
  also needs the ``X-Dex-Inspector-CSRF`` header with the page's CSRF value (a
  page of another origin cannot read it, and a form cannot send a header), an
  ``Origin`` (when sent) equal to the inspector's own, and a ``Sec-Fetch-Site``
  (when sent) of ``same-origin``. Refused: 403.
- Every response carries a Content-Security-Policy that allows only the
  inspector's own scripts (no inline script), so text that slips into HTML
  still cannot run.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_HEADER = "x-dex-inspector-csrf"
"""The header every unsafe request must carry, with :attr:`InspectorAuth.csrf_token`."""
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_MIN_TOKEN_LENGTH = 16


def generate_token() -> str:
    """A new random inspector token."""
    return secrets.token_urlsafe(32)


class InspectorAuth:
    """The token and what is derived from it."""

    def __init__(self, token: str) -> None:
        if not isinstance(token, str) or len(token) < _MIN_TOKEN_LENGTH:
            raise ValueError(f"the inspector token must be at least {_MIN_TOKEN_LENGTH} characters")
        self._token = token
        self.cookie_name = "dex_inspector_" + self._derive("cookie-name")[:10]
        self._cookie_value = self._derive("cookie")
        self.csrf_token = self._derive("csrf")

    def _derive(self, purpose: str) -> str:
        return hmac.new(self._token.encode(), purpose.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self._token.encode())

    def authenticated(self, connection: HTTPConnection) -> bool:
        cookie = connection.cookies.get(self.cookie_name)
        if cookie is not None and hmac.compare_digest(cookie, self._cookie_value):
            return True
        scheme, _, value = connection.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value.strip())

    def cross_site_refusal(self, connection: HTTPConnection) -> str | None:
        """Why an unsafe request is refused as cross-site; ``None`` when it is not."""
        headers = connection.headers
        site = headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            return f"Sec-Fetch-Site is {site!r}"
        origin = headers.get("origin")
        if origin is not None:
            own = f"{connection.url.scheme}://{headers.get('host', '')}"
            if origin != own:
                return f"Origin {origin!r} is not {own!r}"
        sent = headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), self.csrf_token.encode()):
            return f"missing or wrong {CSRF_HEADER} header"
        return None

    def login_response(self, connection: HTTPConnection) -> Response:
        """The redirect that drops ``?token=`` from the URL and sets the cookie."""
        query = [(k, v) for k, v in parse_qsl(connection.url.query) if k != "token"]
        target = connection.url.path + (f"?{urlencode(query)}" if query else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            self.cookie_name,
            self._cookie_value,
            httponly=True,
            samesite="strict",
            secure=connection.url.scheme == "https",
            path="/",
        )
        return response


class InspectorAuthMiddleware:
    """ASGI middleware applying :class:`InspectorAuth` to every HTTP request."""

    def __init__(self, app: ASGIApp, auth: InspectorAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        method = scope["method"]
        response: Response | None = None
        query_token = connection.query_params.get("token")
        if query_token is not None and method == "GET" and self.auth.token_matches(query_token):
            response = self.auth.login_response(connection)
        elif not self.auth.authenticated(connection):
            response = PlainTextResponse(
                "401 Unauthorized: open the URL with the token that dex-agents-ray serve "
                "printed at start.\n",
                status_code=401,
            )
        elif method not in _SAFE_METHODS:
            reason = self.auth.cross_site_refusal(connection)
            if reason is not None:
                response = PlainTextResponse(
                    f"403 Forbidden: cross-site request refused ({reason}).\n", status_code=403
                )
        send = _with_security_headers(send)
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _with_security_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers: list[Any] = list(message.get("headers", []))
            names = {bytes(name).lower() for name, _ in headers}
            extra: MutableMapping[bytes, bytes] = {
                b"content-security-policy": CONTENT_SECURITY_POLICY.encode(),
                b"x-content-type-options": b"nosniff",
                b"referrer-policy": b"no-referrer",
                b"x-frame-options": b"DENY",
                b"cache-control": b"no-store",
            }
            headers.extend((k, v) for k, v in extra.items() if k not in names)
            message = {**message, "headers": headers}
        await send(message)

    return sending
