"""The inspector's eval pages on a 1,000-case run: how long the runs page and the run
page take to load in Chromium on loopback (the issue's stretch goal: <= 2 s each).

A run of ``--cases`` one-turn cases (1,000 by default) on the scripted model, each
calling one read tool and answering, scored by ``contains`` and a length score, is
run with ``run_eval`` into a temporary folder (``--synthetic``: its rows are written
with the results writer instead, no sessions). Then ``dex-agents-ray serve``'s app
serves the folder on loopback, and headless Chromium (Playwright over Debian's
``/usr/bin/chromium``) loads each page ``--loads`` times, each in a fresh browser
context: the first load after the server started (``cold``: the server reads
``results.jsonl``) and the others (``warm``: only stat calls). A load ends when the
page shows its data: the run's row (runs page), every case's row (run page). The
JSON behind each page is timed too, over HTTP.

    .venv/bin/python benchmarks/eval_pages.py [--cases 1000] [--concurrency 100] [--synthetic]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.peers.ray_env import use_repository  # noqa: E402

use_repository()

from dex_agents_ray import AgentSessionFlow, ToolEffect  # noqa: E402
from dex_agents_ray.builtin_loop import (  # noqa: E402
    AgentDefinition,
    ModelRequest,
    ModelUsage,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
    function_tool,
)
from dex_agents_ray.engine import FlowEngine  # noqa: E402
from dex_agents_ray.evals import (  # noqa: E402
    CaseResult,
    CaseStatus,
    EvalCase,
    Score,
    contains,
    run_eval,
    session_id_for,
    write_run_record,
)
from dex_agents_ray.evals._results import ResultsWriter  # noqa: E402
from dex_agents_ray.serve import build_inspector_app, generate_token  # noqa: E402

RUN_ID = "bench-pages"
CHROMIUM = os.environ.get("DEX_TEST_CHROMIUM", "/usr/bin/chromium")
TARGET_S = 2.0


async def lookup(key: str) -> str:
    """A read tool."""
    return f"found {key}"


def script(request: ModelRequest) -> ScriptedModelReply:
    usage = ModelUsage(input_tokens=120, output_tokens=30)
    results = ScriptedModelClient.tool_results(request)
    if results:
        return ScriptedModelReply(text=f"done: {results[-1].output}", usage=usage)
    text = ScriptedModelClient.user_texts(request)[-1]
    call = ScriptedToolCall(tool_name="lookup", arguments={"key": text})
    return ScriptedModelReply(tool_calls=[call], usage=usage)


def bench_flow() -> AgentSessionFlow:
    agent = AgentDefinition(
        name="pages",
        instructions="Look up.",
        model=ScriptedModelClient(script),
        tools=[function_tool(lookup, effect=ToolEffect.READ)],
    )
    return builtin_agent_session_flow(agent, flow_type="EvalPagesBench")


def brevity(sample: Any) -> Score:
    return Score(value=min(1.0, 20 / max(1, len(sample.answer))), passed=True)


def cases(count: int) -> list[EvalCase]:
    # One case in ten expects what the agent does not say: a failed row.
    return [
        EvalCase(
            id=f"case-{i:05d}",
            turns=(f"item {i}",),
            expected="missing" if i % 10 == 0 else "found",
            metadata={"cost_usd": 0.0004},
        )
        for i in range(count)
    ]


def write_synthetic(out: Path, items: list[EvalCase]) -> None:
    """The rows a run of ``items`` writes, without running it."""
    write_run_record(out, run_id=RUN_ID, agent="EvalPagesBench", cases=items)
    rng = random.Random(7)
    rows = []
    for case in items:
        passed = case.expected == "found"
        rows.append(
            CaseResult(
                case_id=case.id,
                session_id=session_id_for(RUN_ID, case.id),
                status=CaseStatus.SCORED,
                scores={"contains": 1.0 if passed else 0.0, "brevity": rng.uniform(0.5, 1)},
                passed=passed,
                turns=1,
                answer=f"done: found {case.turns[0]}",
                input_tokens=240,
                output_tokens=60,
                model_calls=2,
                tool_calls=1,
                latency_s=rng.uniform(0.05, 3),
                cost_usd=0.0004,
                metadata=case.metadata,
            )
        )
    writer = ResultsWriter(out)
    writer.append_many(rows)
    writer.write_summary({"run_id": RUN_ID, "stopped": None})


async def page_loads(
    base: str, token: str, path: str, ready: str, nth: int, loads: int
) -> list[float]:
    """Seconds from navigation until the ``nth`` element ``ready`` (a CSS selector)
    shows, each load in a fresh browser context."""
    from playwright.async_api import async_playwright

    times = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            for _ in range(loads):
                context = await browser.new_context(viewport={"width": 1360, "height": 900})
                page = await context.new_page()
                # Log in first (the cookie), so the timed load is the page itself.
                await page.goto(f"{base}/static/inspector.css?token={token}")
                start = time.perf_counter()
                await page.goto(f"{base}{path}")
                await page.locator(ready).nth(nth).wait_for(timeout=60_000)
                times.append(time.perf_counter() - start)
                await context.close()
        finally:
            await browser.close()
    return times


async def api_times(base: str, token: str, path: str, loads: int) -> list[float]:
    import httpx

    times = []
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        for _ in range(loads):
            start = time.perf_counter()
            response = await http.get(path, headers=headers)
            response.raise_for_status()
            times.append(time.perf_counter() - start)
    return times


async def main(args: argparse.Namespace) -> None:
    import ray
    import uvicorn

    namespace = f"bench-pages-{uuid.uuid4().hex[:8]}"
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    flow = bench_flow()
    items = cases(args.cases)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        out, store = root / "evals" / RUN_ID, root / "engine.db"
        start = time.perf_counter()
        if args.synthetic:
            write_synthetic(out, items)
            print(f"wrote {args.cases} synthetic rows in {time.perf_counter() - start:.2f} s")
        else:
            report = await run_eval(
                flow,
                items,
                run_id=RUN_ID,
                concurrency=args.concurrency,
                scorers=[contains(), brevity],
                out=out,
                store=store,
                namespace=namespace,
            )
            print(
                f"run_eval: {len(report.results)} cases in {time.perf_counter() - start:.1f} s "
                f"(concurrency {args.concurrency})"
            )
        engine = await FlowEngine.start([flow], store=store, namespace=namespace)
        token = generate_token()
        app = build_inspector_app(
            engine.client, [flow], token=token, evals_dir=root / "evals", evals_namespace=namespace
        )
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        serving = asyncio.create_task(server.serve())
        try:
            for _ in range(1200):  # up to a minute for uvicorn to listen
                if server.started:
                    break
                await asyncio.sleep(0.05)
            base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
            n = args.cases
            figures = {
                "runs page": await page_loads(
                    base,
                    token,
                    "/evals",
                    f'tr[data-run="{RUN_ID}"] .pass-rate',
                    0,
                    args.loads,
                ),
                "run page": await page_loads(
                    base,
                    token,
                    f"/evals/runs/{RUN_ID}",
                    "#rows tr",
                    n - 1,
                    args.loads,
                ),
                "GET /api/evals/runs": await api_times(base, token, "/api/evals/runs", args.loads),
                f"GET /api/evals/runs/{RUN_ID}": await api_times(
                    base, token, f"/api/evals/runs/{RUN_ID}", args.loads
                ),
            }
        finally:
            server.should_exit = True
            await serving
            await engine.shutdown(stop_hosts=True)
    ray.shutdown()
    print(f"\n{n:,} cases ({'synthetic rows' if args.synthetic else 'a real run'}), loopback")
    print(f"{'':<32} {'first':>8} {'median of the rest':>20}   target")
    for name, times in figures.items():
        rest = statistics.median(times[1:]) if len(times) > 1 else float("nan")
        page = name.endswith(" page")
        verdict = ("ok" if max(times) <= TARGET_S else "OVER") if page else ""
        print(
            f"{name:<32} {times[0]:>7.3f}s {rest:>19.3f}s   {'<= 2 s: ' + verdict if page else ''}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--loads", type=int, default=4, help="page loads each (the first cold)")
    parser.add_argument("--synthetic", action="store_true", help="write rows, run no sessions")
    asyncio.run(main(parser.parse_args()))
