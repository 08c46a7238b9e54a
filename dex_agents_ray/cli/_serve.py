"""``dex-agents-ray serve``: the session inspector over a running engine, with the eval
runs of a folder (``--evals``, default ``evals``: where ``dex-agents-ray eval`` writes)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys

from dex_agents_ray.cli._connection import (
    ConnectionOptions,
    connection_options,
    connection_parser,
    load_agents,
    start_engine,
)

TOKEN_ENVIRONMENT_VARIABLE = "DEX_AGENTS_RAY_INSPECTOR_TOKEN"


def add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` with the connection flags."""
    serve = sub.add_parser(
        "serve",
        parents=[connection_parser()],
        help="the session inspector web app (sessions, approvals, questions, live transcript)",
        description="Serve the session inspector over a running engine. Every route needs "
        "the token; open the printed URL.",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine)"
    )
    serve.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0: any free)")
    serve.add_argument(
        "--token",
        default=None,
        help=f"the access token (default: ${TOKEN_ENVIRONMENT_VARIABLE}, else a new random one)",
    )
    serve.add_argument(
        "--evals",
        default="evals",
        metavar="DIR",
        help="the folder of eval run directories the eval pages show (default: evals, "
        "where dex-agents-ray eval writes evals/RUN_ID)",
    )


def run_serve(args: argparse.Namespace) -> int:
    """Run ``serve`` until interrupted; returns the exit status."""
    options = connection_options(args)
    token = args.token or os.environ.get(TOKEN_ENVIRONMENT_VARIABLE) or None
    try:
        return asyncio.run(
            _serve(options, host=args.host, port=args.port, token=token, evals=args.evals)
        )
    except KeyboardInterrupt:
        return 0
    except ValueError as error:
        print(f"dex-agents-ray serve: {error}", file=sys.stderr)
        return 2


async def _serve(
    options: ConnectionOptions, *, host: str, port: int, token: str | None, evals: str
) -> int:
    import uvicorn

    from dex_agents_ray.serve import build_inspector_app, generate_token

    flows = load_agents(options.agents)
    token = token or generate_token()
    engine = await start_engine(options, flows)
    try:
        app = build_inspector_app(
            engine.client, flows, token=token, evals_dir=evals, evals_namespace=options.namespace
        )
        # Bind first, so the printed URL names the real port (also for --port 0).
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        bound = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        agents = ", ".join(flow.get_flow_type() for flow in flows)
        print(f"dex-agents-ray inspector for {agents}", flush=True)
        print(f"    open http://{shown}:{bound}/?token={token}", flush=True)
        print(f"    eval runs from {evals}/ at /evals", flush=True)
        await uvicorn.Server(config).serve(sockets=[sock])
        return 0
    finally:
        await engine.shutdown()
