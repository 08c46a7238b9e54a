"""The connection flags of every subcommand that talks to a running engine (``serve``,
and later ``eval`` and ``sessions``): one parser, one set of flags, one doc
(docs/cli.md).

    --address ADDRESS     the Ray cluster (default: $RAY_ADDRESS, else what ray.init()
                          finds: a running local head, or a new local Ray)
    --namespace NAME      the engine's Ray namespace (default: dex-agents-ray)
    --store STORE         SQLite file or postgresql:// URI (default: ./.dex-agents-ray/engine.db)
    --agent MODULE:ATTR   a session Flow to operate (repeatable)

``MODULE:ATTR`` names an ``AgentSessionFlow``, a list or tuple of them, or a
callable without arguments that returns either. The module is imported with the
current directory on ``sys.path`` (as ``uvicorn`` does), and Ray workers must be
able to import it too.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dex_agents_ray.session import AgentSessionFlow

if TYPE_CHECKING:
    from dex_agents_ray.engine import FlowEngine

DEFAULT_NAMESPACE = "dex-agents-ray"


@dataclass(frozen=True, kw_only=True)
class ConnectionOptions:
    """Where the engine runs and which session Flows to operate."""

    address: str | None
    """The Ray address; ``None``: ``$RAY_ADDRESS``, else a local Ray."""
    namespace: str
    """The engine's Ray namespace."""
    store: str | None
    """The store; ``None``: the engine's default (``./.dex-agents-ray/engine.db``)."""
    agents: tuple[str, ...]
    """The ``module:attr`` names given with ``--agent``."""


def connection_parser(*, agents_required: bool = True) -> argparse.ArgumentParser:
    """The connection flags, as a parent parser (``parents=[connection_parser()]``)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("engine connection")
    group.add_argument(
        "--address",
        default=None,
        help="Ray cluster address (default: $RAY_ADDRESS, else what ray.init() finds: "
        "a ray start head on this machine, or a new local Ray)",
    )
    group.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"the engine's Ray namespace (default: {DEFAULT_NAMESPACE})",
    )
    group.add_argument(
        "--store",
        default=None,
        help="SQLite file or postgresql:// URI of the runs (default: ./.dex-agents-ray/engine.db)",
    )
    group.add_argument(
        "--agent",
        dest="agents",
        action="append",
        default=[],
        required=agents_required,
        metavar="MODULE:ATTR",
        help="a session Flow to operate: an AgentSessionFlow, a list of them, or a "
        "function returning either (repeatable)",
    )
    return parser


def connection_options(args: argparse.Namespace) -> ConnectionOptions:
    """The options parsed by :func:`connection_parser`."""
    return ConnectionOptions(
        address=args.address,
        namespace=args.namespace,
        store=args.store,
        agents=tuple(args.agents),
    )


def load_agents(specs: Sequence[str]) -> list[AgentSessionFlow]:
    """The session Flows named by ``--agent`` values, in order, one per Flow type.

    Raises:
        ValueError: A value is not ``module:attr``, names nothing, names something
            that is not a session Flow, or two name the same Flow type.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    flows: list[AgentSessionFlow] = []
    seen: set[str] = set()
    for spec in specs:
        for flow in _load_one(spec):
            flow_type = flow.get_flow_type()
            if flow_type in seen:
                raise ValueError(f"--agent {spec}: Flow type {flow_type!r} is given twice")
            seen.add(flow_type)
            flows.append(flow)
    if not flows:
        raise ValueError("give at least one --agent MODULE:ATTR")
    return flows


def _load_one(spec: str) -> list[AgentSessionFlow]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--agent {spec!r}: expected MODULE:ATTR, such as myapp.agents:flow")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--agent {spec}: cannot import {module_name!r}: {error}") from error
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ValueError(f"--agent {spec}: {module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    wrapped = _framework_agent_flow(spec, value, attr)
    if wrapped is not None:
        return [wrapped]
    if callable(value) and not isinstance(value, AgentSessionFlow):
        value = value()
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        if not isinstance(item, AgentSessionFlow):
            raise ValueError(
                f"--agent {spec}: expected an AgentSessionFlow, got {type(item).__name__}"
            )
    return items


def _framework_agent_flow(spec: str, value: Any, attr: str) -> AgentSessionFlow | None:
    """A bare framework agent (a ``pydantic_ai.Agent`` or an ``agents.Agent``) as its
    session Flow, with a one-line note; ``None`` for anything else. The Flow type is
    the agent's name, or the attribute's, so every process that loads ``spec``
    registers the same one."""
    module = type(value).__module__
    fallback = attr.rsplit(".", 1)[-1]
    if module.startswith("pydantic_ai"):
        from pydantic_ai import Agent as PydanticAgent

        if isinstance(value, PydanticAgent):
            from dex_agents_ray.pydantic_ai import pydantic_ai_session_flow

            flow_type = value.name or fallback
            _note(spec, "a Pydantic AI agent", flow_type, "pydantic_ai_session_flow")
            return pydantic_ai_session_flow(value, flow_type=flow_type)
    if module.startswith("agents."):
        from agents import Agent as SdkAgent

        if isinstance(value, SdkAgent):
            from dex_agents_ray.openai_agents import openai_agents_session_flow

            flow_type = value.name or fallback
            _note(spec, "an OpenAI Agents SDK agent", flow_type, "openai_agents_session_flow")
            return openai_agents_session_flow(value, flow_type=flow_type)
    return None


def _note(spec: str, what: str, flow_type: str, builder: str) -> None:
    print(
        f"--agent {spec}: {what}, run as session Flow {flow_type!r} ({builder}, default options)",
        file=sys.stderr,
    )


class _RayStartNotes(logging.Filter):
    """Drops Ray's log records below ERROR until Ray is initialized: the notes
    ``ray.init`` prints as it starts a local Ray or joins one ("Token
    authentication is enabled ...", "Started a local Ray instance.")."""

    def filter(self, record: logging.LogRecord) -> bool:
        import ray

        return record.levelno >= logging.ERROR or ray.is_initialized()


@contextmanager
def quiet_ray_start() -> Iterator[None]:
    """Keep Ray's start-up notes off the terminal while the block starts or joins Ray
    (a progress bar is on it); Ray's later warnings and its errors still print."""
    import ray  # noqa: F401 - Ray's own log handler is set up on import

    handlers = list(logging.getLogger("ray").handlers)
    notes = _RayStartNotes()
    for handler in handlers:
        handler.addFilter(notes)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(notes)


async def start_engine(options: ConnectionOptions, flows: Sequence[AgentSessionFlow]) -> FlowEngine:
    """Join (or start) Ray and open the engine's store with ``flows`` registered."""
    import logging

    import ray

    from dex_agents_ray.engine import FlowEngine

    address = options.address or os.environ.get("RAY_ADDRESS")
    if address and not ray.is_initialized():
        # Joining a running cluster: no connection chatter on the terminal, and the
        # workers' logs stay in the cluster's log files.
        ray.init(
            address=address,
            namespace=options.namespace,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    return await FlowEngine.start(
        list(flows),
        store=options.store,
        namespace=options.namespace,
        ray_address=options.address,
    )
