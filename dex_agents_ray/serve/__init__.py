"""The session inspector: a small web app over a running engine (``dex-agents-ray serve``).

Two pages, plain HTML and JavaScript served by the app itself (no build step,
nothing from a CDN): the **sessions page** lists every session of the served
Flows with its agent, status and last activity, and filters those waiting for a
person (the ``ActiveStepTypes`` search); the **session page** renders one
session live from its ``AgentEvents`` Stream (``dex_agents_ray.ui_stream``),
with its tool calls, pending approvals and questions, plan, turn controls and
the session Flow graph with the Steps it is in highlighted.

Security: ``dex-agents-ray serve`` binds 127.0.0.1 unless told otherwise; every
route needs the token (printed at start, or given), which the page trades for an
HttpOnly ``SameSite=Strict`` cookie; requests that change a session also need
the page's CSRF header and a same-origin ``Origin``; message text is rendered as
text, and a Content-Security-Policy allows only the app's own scripts. An
application checks each session with ``authorize_session``.

    app = build_inspector_app(engine.client, [flow], token=generate_token())
    uvicorn.run(app, host="127.0.0.1", port=8765)

Needs the ``serve`` extra (``pip install "dex-agents-ray[serve]"``).
"""

try:
    import fastapi  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'dex_agents_ray.serve needs FastAPI: pip install "dex-agents-ray[serve]"'
    ) from error

from dex_agents_ray.serve._app import AuthorizeSession, build_inspector_app
from dex_agents_ray.serve._auth import (
    CONTENT_SECURITY_POLICY,
    CSRF_HEADER,
    InspectorAuth,
    generate_token,
)

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "CSRF_HEADER",
    "AuthorizeSession",
    "InspectorAuth",
    "build_inspector_app",
    "generate_token",
]
