"""The eval pages in headless Chromium (Playwright over Debian's chromium), against real
runs of ``run_eval`` (the scripted eval agent on real Ray and SQLite): the runs page, a
run's case table with its filters and sorting, a case beside its session with the
question a person answers there, a run followed live while it is paused, resumed and
finishes, and two runs compared. One run (``nightly-1``) is shared by the module; the
screenshots under docs/images come from these tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dex_agents_ray import AgentSessionClient, AgentSessionFlow
from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.evals import CaseStatus, EvalControl, RunState, session_id_for
from dex_agents_ray.serve import build_inspector_app
from dex_agents_ray.testing import FileGate
from tests.evals.agents import eval_flow
from tests.serve.eval_runs import SCRIPT_TEXT, nightly_1, nightly_2, run
from tests.serve.helpers import SCREENSHOTS, chromium, new_page, serving
from tests.session.polling import snapshot_when, turn_done

TOKEN = "test-token-evals-0123456789"


@dataclass
class World:
    flow: AgentSessionFlow
    engine: FlowEngine
    evals: Path
    store: Path
    namespace: str
    state: Path
    base: str
    browser: Any


@pytest.fixture(scope="module")
async def world(
    ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    root = tmp_path_factory.mktemp("eval-pages")
    state = root / "state"
    state.mkdir()
    store, evals, namespace = (
        root / "store" / "engine.db",
        root / "evals",
        f"t-{uuid.uuid4().hex[:12]}",
    )
    flow = eval_flow(str(state))
    report = await run(
        flow, "nightly-1", nightly_1(), evals=evals, store=store, namespace=namespace
    )
    assert report.result("needs-person").status is CaseStatus.NEEDS_PERSON
    assert report.result("outage").status is CaseStatus.FAILED
    engine = await FlowEngine.start([flow], store=store, namespace=namespace)
    try:
        app = build_inspector_app(
            engine.client, [flow], token=TOKEN, evals_dir=evals, evals_namespace=namespace
        )
        async with serving(app) as base, chromium() as browser:
            yield World(flow, engine, evals, store, namespace, state, base, browser)
    finally:
        await engine.shutdown(stop_hosts=True)


async def _open(world: World, path: str) -> Any:
    page = await new_page(world.browser)
    await page.goto(f"{world.base}{path}{'&' if '?' in path else '?'}token={TOKEN}")
    await page.locator("body[data-loaded='true'], body[data-case-loaded='true']").wait_for()
    return page


async def _screenshot(page: Any, name: str) -> None:
    """A screenshot as tall as the page's content (no empty space below it)."""
    bottom = await page.evaluate("document.querySelector('main').getBoundingClientRect().bottom")
    await page.set_viewport_size({"width": 1360, "height": max(360, int(bottom) + 24)})
    await page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


async def _group_of_rows(page: Any) -> list[str]:
    groups: list[str] = await page.locator("#rows tr").evaluate_all(
        "rows => rows.map(r => r.dataset.group)"
    )
    return groups


async def test_the_run_page_filters_and_sorts_the_case_table(world: World) -> None:
    page = await _open(world, "/evals/runs/nightly-1")
    assert await page.locator("#rows tr").count() == 7
    stats = page.locator('.stat[data-stat="Pass rate"]')
    assert "80.0%" in await stats.inner_text()  # 4 of the 5 scored cases
    assert "4 of 5 scored" in await stats.inner_text()
    assert await page.locator("th[data-sort='score:contains']").count() == 1
    assert await page.locator("th[data-sort='score:concise']").count() == 1
    for name, expected in (
        ("failed", ["failed"]),
        ("needs_person", ["needs_person"]),
        ("errored", ["errored"]),
    ):
        await page.locator(f".chip[data-filter='{name}']").click()
        await page.locator(f"#rows tr[data-group='{expected[0]}']").wait_for()
        assert await _group_of_rows(page) == expected, name
    assert "the grader is down" in await page.locator("#rows tr").inner_text()
    await page.locator(".chip[data-filter='all']").click()
    # Lowest contains score first, then highest.
    await page.locator("th[data-sort='score:contains']").click()
    first = page.locator("#rows tr").first
    assert await first.get_attribute("data-case") == "wrong-answer"
    await page.locator("th[data-sort='score:contains']").click()
    assert "desc" in (await page.locator("th.sorted").get_attribute("class") or "")
    assert await page.locator("#rows tr").first.get_attribute("data-group") == "passed"
    await page.locator("th[data-sort='case_id']").click()
    assert "sort=case_id" in page.url
    # A finished run has nothing to pause.
    assert await page.locator("#pause").is_disabled()
    assert await page.locator("#cancel").is_disabled()
    await _screenshot(page, "eval-run.png")
    await page.context.close()


async def test_a_case_beside_its_session_and_the_question_answered_there(world: World) -> None:
    page = await _open(world, "/evals/runs/nightly-1/cases/needs-person")
    assert await page.locator("#input li").all_inner_texts() == ["ask about the account"]
    assert await page.locator("#expected").inner_text() == "savings"
    assert "waits for a person" in await page.locator("#needs-note").inner_text()
    card = page.locator(".card.question-card")
    await card.wait_for()  # session.js: the session's pending question
    assert "Which one?" in await card.inner_text()
    await page.locator("li.message.user", has_text="ask about the account").wait_for()
    await page.locator("#graph").evaluate("img => img.decode()")
    await page.locator("#live.on").wait_for()
    await _screenshot(page, "eval-case.png")

    await card.locator("input.free-text").fill("the savings account")
    await card.locator("button.answer").click()
    answer = page.locator("li.message.assistant:not(.streaming)", has_text="the savings account")
    await answer.wait_for()
    await card.wait_for(state="detached")
    sessions = AgentSessionClient(world.engine.client, world.flow)
    await snapshot_when(sessions, session_id_for("nightly-1", "needs-person"), turn_done(1))

    # A case's text is text: the <script> in its input is shown, never run.
    await page.goto(f"{world.base}/evals/runs/nightly-1/cases/wrong-answer")
    await page.locator("body[data-case-loaded='true']").wait_for()
    assert await page.locator("#input li").inner_text() == SCRIPT_TEXT
    assert "found" in await page.locator("#answer").inner_text()
    assert await page.locator('.score-table tr[data-score="contains"]').count() == 1
    await page.locator("li.message.user", has_text="<script>").wait_for()
    assert await page.locator("main script, main img:not(#graph)").count() == 0
    assert await page.evaluate("window.__pwned") is None
    await page.context.close()


async def test_a_run_followed_live_then_compared(world: World) -> None:
    gate = FileGate(world.state, "lookup")
    driver = asyncio.create_task(
        run(
            world.flow,
            "nightly-2",
            nightly_2(),
            evals=world.evals,
            store=world.store,
            namespace=world.namespace,
            concurrency=1,
        )
    )
    try:
        await gate.wait_until_reached(timeout=120)
        runs = await _open(world, "/evals")
        await runs.locator('tr[data-run="nightly-2"][data-status="running"]').wait_for()
        await runs.locator('tr[data-run="nightly-1"][data-status="done"]').wait_for()
        assert await runs.locator('tr[data-run="nightly-1"] .pass-rate').inner_text() == "80.0%"
        await _screenshot(runs, "eval-runs.png")

        page = await _open(world, "/evals/runs/nightly-2")
        marker = await page.evaluate("window.__marker = Math.random()")
        await page.locator("body[data-status='running']").wait_for()
        # One case at a time: the first two are done, the third waits at the gate.
        assert await page.locator("#rows tr[data-group='pending']").count() == 6
        await page.locator("#pause").click()
        await page.locator("body[data-status='paused']").wait_for()
        control = EvalControl("nightly-2", namespace=world.namespace, create=False)
        assert await control.state() is RunState.PAUSED
        gate.release()  # the running case finishes; no new one starts while paused
        await page.locator('#rows tr[data-case="slow-lookup"][data-group="passed"]').wait_for()
        await page.locator("#resume").click()
        await page.locator("body[data-status='done']").wait_for(timeout=120_000)
        assert await page.locator("#rows tr[data-group='pending']").count() == 0
        assert await page.evaluate("window.__marker") == marker  # never reloaded
        await runs.locator('tr[data-run="nightly-2"][data-status="done"]').wait_for()
        report = await driver
    finally:
        gate.release()
        if not driver.done():
            await EvalControl("nightly-2", namespace=world.namespace).set_state(RunState.CANCELLED)
        await asyncio.gather(driver, return_exceptions=True)
    assert report.result("order-status").passed is False

    compare = await _open(world, "/evals/compare?a=nightly-1&b=nightly-2")
    changes = await compare.locator("#shared tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.case, r.dataset.change])"
    )
    assert changes[0] == ["order-status", "regressed"]  # regressions first
    assert changes[1] == ["wrong-answer", "improved"]
    assert {c for c, change in changes[2:]} == {"refund-7", "ask-colour", "needs-person", "outage"}
    assert all(change == "unchanged" for _, change in changes[2:])
    assert await compare.locator("#added tr").evaluate_all("r => r.map(x => x.dataset.case)") == [
        "slow-lookup",
        "new-case",
    ]
    assert await compare.locator("#removed tr").evaluate_all("r => r.map(x => x.dataset.case)") == [
        "two-turns"
    ]
    assert "over the 6 shared cases" in await compare.locator(".stat").first.inner_text()
    await _screenshot(compare, "eval-compare.png")
    await compare.locator("#changed-only").check()
    assert await compare.locator("#shared tr").count() == 2


async def test_eval_routes_need_the_token_and_posts_refuse_cross_site(world: World) -> None:
    async with httpx.AsyncClient(base_url=world.base, timeout=30) as http:
        for path in ("/evals", "/api/evals/runs", "/api/evals/runs/nightly-1", "/api/evals/events"):
            assert (await http.get(path)).status_code == 401, path
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        detail = (await http.get("/api/evals/runs/nightly-1", headers=bearer)).json()
        assert detail["run"]["status"] == "done" and len(detail["rows"]) == 7
        assert (await http.get("/api/evals/runs/nope", headers=bearer)).status_code == 404
        assert (await http.get("/api/evals/runs/%2E%2E", headers=bearer)).status_code == 404
        # No CSRF header: refused before anything runs.
        refused = await http.post("/api/evals/runs/nightly-1/cancel", headers=bearer)
        assert refused.status_code == 403
        csrf = {**bearer, "X-Dex-Inspector-CSRF": _csrf(await http.get("/evals", headers=bearer))}
        done = await http.post("/api/evals/runs/nightly-1/pause", headers=csrf)
        assert done.status_code == 409 and "it is done" in done.text
        case = await http.get("/api/evals/runs/nightly-1/cases/outage", headers=bearer)
        assert case.json()["row"]["error"].endswith("the grader is down")
        assert case.json()["case"]["expected"] == "found"


def _csrf(response: httpx.Response) -> str:
    marker = 'name="dex-csrf" content="'
    text = response.text
    start = text.index(marker) + len(marker)
    return text[start : text.index('"', start)]
