"""The session inspector: a small web app over a running engine (``dex-agents-ray serve``).

Two session pages, plain HTML and JavaScript served by the app itself (no build step,
nothing from a CDN): the **sessions page** lists every session of the served
Flows with its agent, status and last activity, and filters those waiting for a
person (the ``ActiveStepTypes`` search); the **session page** renders one
session live from its ``AgentEvents`` Stream (``dex_agents_ray.ui_stream``),
with its tool calls, pending approvals and questions, plan, turn controls and
the session Flow graph with the Steps it is in highlighted.

With ``evals_dir`` (``dex-agents-ray serve --evals DIR``, default ``evals``) it
shows the eval runs written there (``run_eval(out=...)``) too: the **runs page**
(``/evals``: each run's agent, cases, pass rate, mean scores, tokens, cost, wall
time and status, live), a **run page** (its figures, pause / resume / cancel, the
case table with filters and sorting, live while it runs), a **case page** (its
input, expected answer and scores beside its session, whose approvals and
questions a person answers there) and a **compare page** (two runs per case,
regressions first, added and removed cases apart).

Security: ``dex-agents-ray serve`` binds 127.0.0.1 unless told otherwise; every
route needs the token (printed at start, or given), which the page trades for an
HttpOnly ``SameSite=Strict`` cookie; requests that change something also need
the page's CSRF header and a same-origin ``Origin``; message text is rendered as
text, and a Content-Security-Policy allows only the app's own scripts. An
application checks each session with ``authorize_session``.

    app = build_inspector_app(
        engine.client, [flow], token=generate_token(), evals_dir="evals"
    )
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
