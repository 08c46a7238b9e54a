"""This project on the peers' workload: a local Ray, the SQLite store, real Steps.

Variants:
    flow-shared / flow-dedicated: the workload as one engine Flow per session (a
        model Step asks for 3 tools, 3 tool Steps run in parallel and publish their
        results, a join Step waits for the 3 and hands over to a model Step that
        answers), shared or dedicated placement. The client starts the run and
        waits for it to close, as the peers' clients call one workflow.
    flow-shared-postgres / session-shared-postgres: the same on a throwaway local
        PostgreSQL 15 server instead of SQLite.
    session-shared-ray / session-shared / session-dedicated / session-shared-tasks:
        real agent sessions (``builtin_agent_session_flow`` with a scripted model
        and 3 no-op function tools). ``session-shared-ray`` is the default
        configuration: tool Steps sent to Ray, on pooled executors; the others
        run tool Steps inline in the host, or as one Ray task per attempt
        (``RemoteExecution.TASK``). The client
        starts the session, sends each turn's user message and reads the
        ``AgentEvents`` stream until the turn completes, as an application does.
    pydantic-ai: ``session-shared-ray`` with an unchanged ``pydantic_ai.Agent``
        (``pydantic_ai_session_flow``) in place of the built-in loop: its
        ``FunctionModel`` asks for the same 3 calls and answers the same text, its
        3 no-op tools are ``@agent.tool_plain`` functions (``pydantic_ai_peer.py``).
    openai-agents: the same with an unchanged OpenAI Agents SDK ``agents.Agent``
        (``openai_agents_session_flow``): a scripted ``agents`` ``Model`` asks for the
        same 3 calls and answers the same text, its 3 no-op tools are
        ``@function_tool`` functions (``openai_agents_peer.py``).

Every process of the runtime counts: the job reports the CPU and the peak RSS of
the host actors next to the client process's (``helper_processes``), and the RSS of
Ray's own processes (GCS, raylet, agents) separately.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import dex
import ray
from dex import (
    AsyncContext,
    AttributeMap,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    Step,
    StepList,
    StepMovement,
    Wait,
)

from dex_agents_ray import AgentSessionClient, ToolCallStepOptions, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
    function_tool,
)
from dex_agents_ray.engine import (
    ExecutorPoolOptions,
    FlowEngine,
    RayTaskOptions,
    RemoteExecution,
)
from dex_agents_ray.engine._engine import task_worker_system_config

from .workload import (
    FINAL_TEXT,
    QUERY_TEXT,
    TOOL_TEXT,
    TOOLS,
    TURNS,
    Message,
    PeerUnavailable,
    ToolCall,
    encode,
    run_tool,
)

# Distributions whose versions a job reports.
PACKAGES: tuple[str, ...] = ("ray", "dex-python-sdk")

VARIANTS = (
    "flow-shared",
    "flow-dedicated",
    "session-shared-ray",
    "session-shared-ray-nosockets",
    "session-shared",
    "session-dedicated",
    "session-shared-tasks",
    "pydantic-ai",
    "openai-agents",
    "flow-shared-postgres",
    "session-shared-postgres",
)

# -- the workload as an engine Flow -----------------------------------------------------

Transcript = AttributeMap("transcript", str)
"""Each model reply, stored under ``<turn>-ask`` / ``<turn>-answer``."""
ToolResults = Channel("tool_results", str)
"""Each tool result, published by its tool Step."""


def _key(turn: int, part: str) -> str:
    return f"{turn:03d}-{part}"


class AskModel(Step[int]):
    """The model step that asks for the turn's tool calls."""

    async def execute(self, context: AsyncContext, input: int) -> dex.StepDecision:  # type: ignore[override]
        calls: list[ToolCall] = [
            {"id": f"call_{input}_{i}", "name": "lookup", "args": {"query": QUERY_TEXT}}
            for i in range(TOOLS)
        ]
        reply: Message = {"role": "assistant", "content": "", "tool_calls": calls}
        Transcript.set(context, _key(input, "ask"), encode(reply))
        return dex.go_to_many(
            *(StepMovement.of(RunTool, call["id"]) for call in calls),
            StepMovement.of(JoinTools, input),
        )


class RunTool(Step[str]):
    """One tool call; its result goes to the join through a Channel."""

    async def execute(self, context: AsyncContext, input: str) -> dex.StepDecision:  # type: ignore[override]
        call: ToolCall = {"id": input, "name": "lookup", "args": {"query": QUERY_TEXT}}
        ToolResults.publish(context, encode(run_tool(call)))
        return dex.dead_end()


class JoinTools(Step[int]):
    """Waits for the turn's tool results (not a workload step: the fan-in)."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(ToolResults.for_n(TOOLS))

    def execute(self, context: Context, input: int) -> dex.StepDecision:
        return dex.go_to(Answer, input)


class Answer(Step[int]):
    """The model step that answers, then the next turn (or the end)."""

    async def execute(self, context: AsyncContext, input: int) -> dex.StepDecision:  # type: ignore[override]
        reply: Message = {"role": "assistant", "content": FINAL_TEXT, "tool_calls": []}
        Transcript.set(context, _key(input, "answer"), encode(reply))
        if input + 1 < TURNS:
            return dex.go_to(AskModel, input + 1)
        return dex.graceful_complete(context.step_execution_id)


class AgentLoopFlow(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(AskModel()).other_steps(RunTool(), JoinTools(), Answer())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Transcript, ToolResults)


# -- the workload as agent sessions ------------------------------------------------------


def _reply(request: ModelRequest) -> ScriptedModelReply:
    if ScriptedModelClient.tool_results(request):
        return ScriptedModelReply(text=FINAL_TEXT)
    return ScriptedModelReply(
        tool_calls=[
            ScriptedToolCall(
                tool_call_id=f"c{i}", tool_name=f"tool_{i}", arguments={"query": QUERY_TEXT}
            )
            for i in range(TOOLS)
        ]
    )


def session_flow(tools: str) -> Any:
    """An agent session flow with a scripted model and ``TOOLS`` no-op tools.

    ``tools``: ``"ray"`` (the default options: pooled executors), ``"inline"``
    (in the host) or ``"tasks"`` (a Ray task per attempt).
    """
    options = {
        "ray": ToolCallStepOptions(),
        "inline": ToolCallStepOptions(run_inline=True),
        "tasks": ToolCallStepOptions(
            ray=RayTaskOptions(num_cpus=0.1, execution=RemoteExecution.TASK)
        ),
    }[tools]

    def make(i: int) -> Any:
        async def tool(query: str) -> str:
            return TOOL_TEXT

        tool.__name__ = f"tool_{i}"
        tool.__doc__ = "A no-op tool."
        return function_tool(effect=ToolEffect.READ, step_options=options)(tool)

    agent = AgentDefinition(
        name="bench",
        instructions="Benchmark agent.",
        model=ScriptedModelClient(_reply),
        tools=[make(i) for i in range(TOOLS)],
    )
    return builtin_agent_session_flow(agent, flow_type=f"Bench{tools.title()}")


async def run_session(
    sessions: AgentSessionClient,
    session_id: str,
    turns: int = TURNS,
    turn_ms: list[float] | None = None,
    events: list[int] | None = None,
) -> None:
    """One session of ``turns`` turns, reading the AgentEvents stream (a long poll);
    each turn's latency in milliseconds goes to ``turn_ms`` and the number of events
    it read to ``events`` when given."""
    token = ""
    for turn in range(1, turns + 1):
        start = time.perf_counter()
        if turn == 1:
            await sessions.start_session(session_id, "turn 1")
        else:
            await sessions.send_user_message(session_id, f"turn {turn}")
        read = 0
        while True:
            message = await sessions.read_event(session_id, token, timeout=300)
            token = message.resume_token
            read += 1
            if message.value.type.value in ("turn_completed", "turn_failed"):
                break
        if turn_ms is not None:
            turn_ms.append((time.perf_counter() - start) * 1e3)
        if events is not None:
            events.append(read)


# -- the system ----------------------------------------------------------------------------


class DexEngine:
    """One engine on a fresh local Ray; ``session`` runs one workload session."""

    def __init__(self, engine: FlowEngine, flow: Any, sessions: AgentSessionClient | None) -> None:
        self._engine = engine
        self._flow = flow
        self._sessions = sessions
        self._turn_ms: list[float] = []
        self._host_calls = 0
        self._turns = 0
        self.versions: dict[str, str] = {}
        """Versions of what the job runs beside ``PACKAGES`` (the agent framework's)."""
        call = engine.client._call

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self._host_calls += 1
            return await call(*args, **kwargs)

        engine.client._call = counted  # type: ignore[method-assign]

    @property
    def sessions(self) -> AgentSessionClient:
        """The session client (agent-session variants only)."""
        if self._sessions is None:
            raise TypeError("this variant runs engine Flows, not agent sessions")
        return self._sessions

    async def session(self, session_id: str) -> None:
        if self._sessions is not None:
            # The workload's warm-up sessions are "warm-<i>": their turns are not timed.
            timed = None if session_id.startswith("warm-") else self._turn_ms
            await run_session(self._sessions, session_id, turn_ms=timed)
            self._turns += TURNS
            return
        await self._engine.client.start_flow(self._flow, session_id, 0)
        result = await self._engine.client.wait_for_flow(session_id, timeout=600)
        if result.status is not dex.FlowStatus.COMPLETED:
            raise RuntimeError(f"session {session_id} ended {result.status}")

    def turn_latencies_ms(self) -> list[float]:
        """Each timed turn's latency (agent-session variants; none for Flows)."""
        return list(self._turn_ms)

    def host_calls_per_turn(self) -> float | None:
        """The client's Ray calls to hosts per agent turn (RPCs and long polls;
        every session of the job, warm-ups included), or ``None`` for Flows."""
        return self._host_calls / self._turns if self._turns else None

    def helper_processes(self) -> list[int]:
        """PIDs of this engine's host actors (they run the Steps)."""
        pids: list[int] = []
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] == self._engine.namespace and actor["name"].startswith(
                ("dexrun:", "dexhost:", "dexexec:")
            ):
                handle = ray.get_actor(actor["name"], namespace=actor["namespace"])
                pids.append(_pid(handle))
        return pids

    def process_roles(self) -> dict[int, str]:
        """``{pid: "host" | "executor"}`` of this engine's actors."""
        roles: dict[int, str] = {}
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] != self._engine.namespace:
                continue
            name = actor["name"]
            role = "executor" if name.startswith("dexexec:") else "host"
            if name.startswith(("dexrun:", "dexhost:", "dexexec:")):
                try:
                    handle = ray.get_actor(name, namespace=actor["namespace"])
                except ValueError:
                    continue  # ended meanwhile (an executor that drained)
                roles[_pid(handle)] = role
        return roles

    def ray_system_processes(self) -> list[int]:
        """PIDs of Ray's own processes on this machine (GCS, raylet, agents, ...)."""
        import psutil  # type: ignore[import-untyped]

        mine = set(self.helper_processes()) | {os.getpid()}
        found = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            cmdline = " ".join(process.info["cmdline"] or ())
            if process.info["pid"] not in mine and (
                "gcs_server" in cmdline
                or "raylet" in cmdline
                or "ray/dashboard" in cmdline
                or "ray/_private" in cmdline
                or "ray::" in cmdline
            ):
                found.append(int(process.info["pid"]))
        return found


def _pid(handle: Any) -> int:
    pid: int = ray.get(handle.pid.remote())
    return pid


_REPO = str(Path(__file__).resolve().parents[2])


@asynccontextmanager
async def open_system(
    workdir: Path, variant: str, runtime_env: dict[str, Any] | None = None
) -> AsyncIterator[DexEngine]:
    """The engine of ``variant`` on a fresh local Ray (``runtime_env``: the job's,
    for a benchmark that instruments Ray's workers)."""
    if not variant.endswith("-postgres"):
        async with _open(workdir / "engine.db", variant, runtime_env) as system:
            yield system
        return
    # A throwaway PostgreSQL 15 server (the test suite's; scripts/services installs it).
    import psycopg

    from tests.stores.postgres_server import find_bin_dir, running_server

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed: run scripts/services")
    with running_server(bin_dir) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        async with _open(
            server.dsn("bench"), variant.removesuffix("-postgres"), runtime_env
        ) as system:
            yield system


@asynccontextmanager
async def _open(
    store: Path | str, variant: str, runtime_env: dict[str, Any] | None = None
) -> AsyncIterator[DexEngine]:
    if variant == "pydantic-ai" and importlib.util.find_spec("pydantic_ai") is None:
        raise PeerUnavailable(
            "pydantic_ai is not installed (pip install -c constraints.txt -e '.[pydantic-ai]')"
        )
    if variant == "openai-agents" and importlib.util.find_spec("agents") is None:
        raise PeerUnavailable(
            "openai-agents is not installed (pip install -c constraints.txt -e '.[openai-agents]')"
        )
    repo = _REPO
    # Ray workers unpickle this module's Steps by reference: give them the repository.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH", "")) if p
    )
    if repo not in sys.path:
        sys.path.insert(0, repo)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        include_dashboard=False,
        log_to_driver=False,
        namespace="dex-bench",
        _system_config=task_worker_system_config(),
        runtime_env=runtime_env,
    )
    # "-nosockets": every call between processes through Ray (no Unix sockets).
    sockets = not variant.endswith("-nosockets")
    kind, _, rest = variant.removesuffix("-nosockets").partition("-")
    placement = "dedicated" if rest.startswith("dedicated") else "shared"
    tools = "tasks" if rest.endswith("tasks") else "ray" if rest.endswith("ray") else "inline"
    flow: Any
    versions: dict[str, str] = {}
    if variant == "pydantic-ai":  # the default configuration, with a Pydantic AI agent
        from .pydantic_ai_peer import session_flow as pydantic_ai_flow

        kind, placement, flow = "session", "shared", pydantic_ai_flow()
        versions["pydantic-ai-slim"] = metadata.version("pydantic-ai-slim")
    elif variant == "openai-agents":  # the same, with an OpenAI Agents SDK agent
        from .openai_agents_peer import session_flow as openai_agents_flow

        kind, placement, flow = "session", "shared", openai_agents_flow()
        versions["openai-agents"] = metadata.version("openai-agents")
    else:
        flow = AgentLoopFlow() if kind == "flow" else session_flow(tools)
    engine = await FlowEngine.start(
        [flow],
        store=store,
        namespace="dex-bench",
        placement=placement,
        local_channels=sockets,
        executor_pool=ExecutorPoolOptions(local_channel=sockets),
    )
    sessions = None if kind == "flow" else AgentSessionClient(engine.client, flow)
    if placement == "shared":
        # The pool is long-lived in real use: start every host before measuring.
        names: dict[str, str] = {}
        for i in range(1000):
            names.setdefault(engine.placement.host_name(f"pool-{i}"), f"pool-{i}")
        await asyncio.gather(*(engine.host(flow_id).pid.remote() for flow_id in names.values()))
    system = DexEngine(engine, flow, sessions)
    system.versions.update(versions)
    if placement == "shared":
        # ...and warm: one session on each host loads the Flow definition and the
        # modules its Steps import there, as a long-lived pool has done long before
        # (the workload's own warm-up sessions reach only the hosts they hash to).
        await asyncio.gather(*(system.session(f"warm-{flow_id}") for flow_id in names.values()))
    try:
        yield system
    finally:
        await engine.shutdown(stop_hosts=True)
        ray.shutdown()
