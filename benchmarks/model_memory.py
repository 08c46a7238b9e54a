"""Where ``RunModel`` should run, for memory: in the session's host, or as a Ray task.

``import litellm`` costs a process about 200 MiB. By default a session's
``RunModel`` Step runs in its host actor, so every host imports LiteLLM;
``AgentSessionOptions(model_ray_options=RayTaskOptions(...))`` runs it as a Ray
task instead, and only Ray's task workers import it. This benchmark measures
both, with one host per session (``placement="dedicated"``) and with a pool of
hosts (``placement="shared"``).

Each configuration starts an engine on one local Ray and runs S sessions at
once, one turn each, with ``LiteLLMModelClient`` against the loopback
OpenAI-compatible server of the tests: the model asks for an inline tool that
reports what its host has loaded, then answers. Once every turn has ended, and
the sessions are idle but resident (no passivation), it sums the memory of the
session hosts and, separately, of the Ray task workers that ran ``RunModel``
(each model call notes its process ID). RSS counts shared pages once per
process; USS (pages no other process maps) is what a process would free on
exit. Both come from ``/proc/<pid>/smaps_rollup`` (Linux).

Prints, per configuration: host processes, how many have LiteLLM loaded (the
inline tool's report), host RSS/USS in total and per session, the task workers
that ran ``RunModel`` and their memory, the idle LiteLLM-loaded task workers Ray
still keeps (the configurations share one Ray, in the order printed), and the
ratio of the in-host to the in-task totals for each placement; then one
dedicated host's memory with and without LiteLLM.

    .venv/bin/python benchmarks/model_memory.py [--sessions 20] [--model-task-cpus 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray

from dex_agents_ray import AgentSessionClient, AgentSessionFlow, ToolCallStepOptions, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    FunctionTool,
    ModelOutputWriter,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    builtin_agent_session_options,
    function_tool,
)
from dex_agents_ray.engine import FlowEngine, RayTaskOptions
from dex_agents_ray.engine._engine import task_worker_system_config
from dex_agents_ray.litellm import LiteLLMModelClient
from dex_agents_ray.testing import FileGate

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
HOST_PREFIXES = ("dexrun:", "dexhost:")
TIMEOUT_S = 600.0

REPORT_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_report_1",
    "name": "host_report",
    "arguments": "{}",
    "status": "completed",
}
ANSWER = {
    "type": "message",
    "id": "msg_2",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Reported.", "annotations": []}],
}
USAGE = {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}


# --- The flow: Ray workers import these by module name (benchmarks.model_memory) ------------


def api_key() -> str:
    return "sk-benchmark"


def _note_pid(directory: str) -> None:
    Path(directory, str(os.getpid())).touch()


@dataclass(frozen=True, kw_only=True)
class PidNotingModel:
    """A ``LiteLLMModelClient`` that first notes which process makes the call."""

    inner: LiteLLMModelClient
    pid_dir: str
    """A folder that gets an empty file named after each calling process's PID."""

    async def call_model(self, request: ModelRequest, output: ModelOutputWriter) -> ModelResponse:
        _note_pid(self.pid_dir)
        return await self.inner.call_model(request, output)

    def estimate_input_tokens(self, request: ModelRequest) -> int:
        return self.inner.estimate_input_tokens(request)

    def supports_forced_tool_choice(self, settings: ModelSettings) -> bool:
        return self.inner.supports_forced_tool_choice(settings)


def host_report_tool(gate_dir: str) -> FunctionTool[[], Any]:
    """An inline tool that waits at the gate ``first-calls``, then reports on its host.

    The gate holds every session between its two model calls until all first
    calls are answered: the loopback server answers requests in arrival order,
    so the benchmark can queue all tool calls first and all answers after.
    """

    async def host_report() -> str:
        """What the session's host process has loaded (runs in the host)."""
        await FileGate(gate_dir, "first-calls").wait_for_release()
        return json.dumps({"pid": os.getpid(), "litellm": "litellm" in sys.modules})

    inline = ToolCallStepOptions(run_inline=True)
    return function_tool(host_report, effect=ToolEffect.READ, step_options=inline)


def build_flow(
    api_base: str, *, model_in_task: bool, work_dir: Path, model_task_cpus: float
) -> AgentSessionFlow:
    """A one-tool LiteLLM agent; ``RunModel`` in a Ray task or in the host."""
    client = LiteLLMModelClient("openai/gpt-5-mini", api_base=api_base, api_key_provider=api_key)
    agent = AgentDefinition(
        name="reporter",
        instructions="You report on the host.",
        model=PidNotingModel(inner=client, pid_dir=str(work_dir / "model-pids")),
        tools=[host_report_tool(str(work_dir / "gates"))],
    )
    options = replace(
        builtin_agent_session_options(agent),
        model_ray_options=RayTaskOptions(num_cpus=model_task_cpus) if model_in_task else None,
    )
    kind = "Task" if model_in_task else "Host"
    return AgentSessionFlow(
        BuiltinLoopAgentRunner(agent), flow_type=f"Memory{kind}Model", options=options
    )


# --- Process memory ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Memory:
    """Memory of one or more processes, in bytes."""

    rss: int = 0
    uss: int = 0

    def __add__(self, other: Memory) -> Memory:
        return Memory(rss=self.rss + other.rss, uss=self.uss + other.uss)


def process_memory(pid: int) -> Memory:
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as file:
        for line in file:
            name, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                fields[name] = int(rest.split()[0]) * 1024
    return Memory(rss=fields["Rss"], uss=fields["Private_Clean"] + fields["Private_Dirty"])


def total_memory(pids: Iterable[int]) -> Memory:
    return sum((process_memory(pid) for pid in pids), Memory())


def ray_worker_pids() -> set[int]:
    """Processes whose command line starts ``ray::`` (Ray's actor and task workers)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # it exited
            continue
        if cmdline.startswith(b"ray::"):
            pids.add(int(entry.name))
    return pids


async def host_pids(namespace: str) -> set[int]:
    names = [
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == namespace and actor["name"].startswith(HOST_PREFIXES)
    ]
    handles = [ray.get_actor(name, namespace=namespace) for name in names]
    return set(await asyncio.gather(*(handle.pid.remote() for handle in handles)))


# --- One configuration ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Row:
    placement: str
    model_in_task: bool
    sessions: int
    hosts: Memory
    host_count: int
    hosts_with_litellm: int
    median_host: Memory
    task_workers: Memory
    task_worker_count: int
    pool: Memory
    pool_count: int
    """Task workers that ran ``RunModel`` in this or an earlier configuration and are
    still alive: Ray keeps idle workers, and these have LiteLLM loaded."""

    @property
    def label(self) -> str:
        return f"{self.placement}, model in {'task' if self.model_in_task else 'host'}"

    @property
    def total(self) -> Memory:
        return self.hosts + self.task_workers


async def turn_ended(sessions: AgentSessionClient, session_id: str) -> dict[str, Any]:
    """Wait until the session's first turn ended; return its host report."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    while True:
        snapshot = await sessions.get_agent_snapshot(session_id)
        state = snapshot.state
        if state is not None and state.turn_count >= 1 and state.active_turn_id is None:
            if state.last_turn_error is not None:
                raise RuntimeError(f"{session_id}: the turn failed: {state.last_turn_error}")
            output = next(m.tool_output for m in snapshot.messages if m.tool_output)
            report: dict[str, Any] = json.loads(output)
            return report
        if loop.time() > deadline:
            raise TimeoutError(f"{session_id}: the turn did not end; last: {snapshot!r}")
        await asyncio.sleep(0.2)


async def measure(
    directory: Path,
    provider: Any,
    fake: Any,
    *,
    placement: str,
    model_in_task: bool,
    count: int,
    model_task_cpus: float,
    earlier_workers: set[int],
) -> Row:
    name = f"{placement}-{'task' if model_in_task else 'host'}"
    work_dir = directory / name
    (work_dir / "model-pids").mkdir(parents=True)
    flow = build_flow(
        provider.openai_api_base,
        model_in_task=model_in_task,
        work_dir=work_dir,
        model_task_cpus=model_task_cpus,
    )
    namespace = f"model-memory-{name}-{uuid.uuid4().hex[:8]}"
    engine = await FlowEngine.start(
        [flow], store=work_dir / "engine.db", namespace=namespace, placement=placement
    )
    sessions = AgentSessionClient(engine.client, flow)
    gate = FileGate(work_dir / "gates", "first-calls")
    ids = [f"{name}-{i}" for i in range(count)]
    try:
        provider.reset()
        provider.enqueue(
            fake.RESPONSES_PATH, *[fake.responses_stream(output=[REPORT_CALL])] * count
        )
        await asyncio.gather(*(sessions.start_session(i, "What does the host hold?") for i in ids))
        await gate.wait_until_reached(count, timeout=TIMEOUT_S)
        answers = [fake.responses_stream(output=[ANSWER], usage=USAGE)] * count
        provider.enqueue(fake.RESPONSES_PATH, *answers)
        gate.release()
        reports = await asyncio.gather(*(turn_ended(sessions, i) for i in ids))
        hosts = await host_pids(namespace)
        model_pids = {int(p.name) for p in (work_dir / "model-pids").iterdir()}
        workers = model_pids - hosts
        alive = ray_worker_pids()
        if not workers <= alive:
            raise RuntimeError(f"{name}: RunModel ran outside Ray's workers: {workers}")
        earlier_workers |= workers
        pool = (earlier_workers & alive) - hosts
        by_host = {int(r["pid"]): bool(r["litellm"]) for r in reports}
        if set(by_host) != hosts:
            raise RuntimeError(f"{name}: sessions ran in {set(by_host)}, hosts are {hosts}")
        per_host = [process_memory(pid) for pid in hosts]
        return Row(
            placement=placement,
            model_in_task=model_in_task,
            sessions=count,
            hosts=sum(per_host, Memory()),
            host_count=len(hosts),
            hosts_with_litellm=sum(by_host.values()),
            median_host=Memory(
                rss=int(statistics.median(m.rss for m in per_host)),
                uss=int(statistics.median(m.uss for m in per_host)),
            ),
            task_workers=total_memory(workers),
            task_worker_count=len(workers),
            pool=total_memory(pool),
            pool_count=len(pool),
        )
    finally:
        await engine.shutdown(stop_hosts=True)


# --- Report -------------------------------------------------------------------------------------


def mib(value: float) -> str:
    return f"{value / MIB:.0f}"


def print_report(rows: list[Row]) -> None:
    print(
        f"\n{'configuration':<26}{'sessions':>9}{'hosts':>7}{'w/ LiteLLM':>11}"
        f"{'host RSS':>10}{'/session':>10}{'host USS':>10}{'/session':>10}"
        f"{'task workers':>14}{'TW RSS':>8}{'TW USS':>8}{'total RSS':>11}{'total USS':>11}"
        f"{'pool':>6}{'pool RSS':>10}"
    )
    for row in rows:
        print(
            f"{row.label:<26}{row.sessions:>9}{row.host_count:>7}{row.hosts_with_litellm:>11}"
            f"{mib(row.hosts.rss):>10}{mib(row.hosts.rss / row.sessions):>10}"
            f"{mib(row.hosts.uss):>10}{mib(row.hosts.uss / row.sessions):>10}"
            f"{row.task_worker_count:>14}{mib(row.task_workers.rss):>8}"
            f"{mib(row.task_workers.uss):>8}{mib(row.total.rss):>11}{mib(row.total.uss):>11}"
            f"{row.pool_count:>6}{mib(row.pool.rss):>10}"
        )
    print(
        "(MiB; TW = Ray task workers that ran RunModel in this configuration; total = hosts + TW;"
        "\n pool = task workers alive with LiteLLM loaded, from this or an earlier configuration)"
    )
    for placement in ("dedicated", "shared"):
        pair = {row.model_in_task: row for row in rows if row.placement == placement}
        if len(pair) == 2:
            host, task = pair[False], pair[True]
            print(
                f"{placement}: model in host / model in task = "
                f"{host.total.rss / task.total.rss:.2f}x RSS, "
                f"{host.total.uss / task.total.uss:.2f}x USS"
            )
    one_host = {row.model_in_task: row for row in rows if row.placement == "dedicated"}
    if len(one_host) == 2:
        loaded, bare = one_host[False].median_host, one_host[True].median_host
        print(
            f"one dedicated host (median): with LiteLLM {mib(loaded.rss)} MiB RSS / "
            f"{mib(loaded.uss)} MiB USS; without {mib(bare.rss)} / {mib(bare.uss)}; "
            f"LiteLLM adds {mib(loaded.rss - bare.rss)} / {mib(loaded.uss - bare.uss)}"
        )


async def main(count: int, model_task_cpus: float, placements: list[str]) -> None:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Ray workers import this module, and the flow's classes, by name.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    # The tests' helper module is not mypy --strict clean; load it as a plain module.
    fake = importlib.import_module("tests.fake_provider")
    provider = fake.FakeProviderServer()
    await provider.start()
    directory = Path(tempfile.mkdtemp(prefix="dex-model-memory-"))
    ray.init(
        include_dashboard=False,
        namespace="model-memory",
        log_to_driver=False,
        _system_config=task_worker_system_config(),
    )
    rows = []
    task_workers: set[int] = set()
    try:
        for placement in placements:
            for model_in_task in (False, True):
                row = await measure(
                    directory,
                    provider,
                    fake,
                    placement=placement,
                    model_in_task=model_in_task,
                    count=count,
                    model_task_cpus=model_task_cpus,
                    earlier_workers=task_workers,
                )
                print(f"measured {row.label}", flush=True)
                rows.append(row)
    finally:
        ray.shutdown()
        await provider.close()
    print_report(rows)


def cli() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20, help="concurrent sessions (S)")
    parser.add_argument(
        "--model-task-cpus", type=float, default=0.1, help="num_cpus of a RunModel Ray task"
    )
    parser.add_argument(
        "--placement",
        choices=["dedicated", "shared"],
        action="append",
        help="measure only this placement (repeatable); default both",
    )
    args = parser.parse_args()
    asyncio.run(
        main(args.sessions, args.model_task_cpus, args.placement or ["dedicated", "shared"])
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    # Run as benchmarks.model_memory, not __main__, so Ray workers import the flow by name.
    importlib.import_module("benchmarks.model_memory").cli()
