"""The inspector in headless Chromium (Playwright over Debian's chromium): find a session
waiting for approval, approve it in the page and watch the result stream in; answer a
question; text with ``<script>`` stays text; no token, no page; a cross-site POST is
refused. The screenshots under docs/images come from these runs."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from dex_agents_ray.serve import build_inspector_app
from tests.serve.helpers import SCREENSHOTS, chromium, new_page, serving, shown
from tests.serve.sessions import SCRIPT_TEXT, TOKEN, start_example_sessions
from tests.session.polling import eventually, has_interrupt, snapshot_when, turn_done


async def test_approve_a_waiting_session_in_the_page(engine_factory: Any) -> None:
    engine, sessions = await start_example_sessions(engine_factory)
    # Each event response ends after 2 events: the page reconnects with Last-Event-ID
    # again and again while the approved turn runs.
    app = build_inspector_app(engine.client, [sessions.flow], token=TOKEN, max_stream_events=2)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    async with serving(app) as base, chromium() as browser:
        page = await new_page(browser)
        await page.goto(f"{base}/?token={TOKEN}")
        assert page.url == f"{base}/"  # the token left the address bar for a cookie
        await page.locator('tr[data-session="order-status"]').wait_for()
        await page.screenshot(path=str(SCREENSHOTS / "inspector-sessions.png"))

        await page.check("#waiting")
        await page.locator('tr[data-session="order-status"]').wait_for(state="detached")
        assert await page.locator("#rows tr").count() == 2
        await page.locator('tr[data-session="refund-a1"] a').click()

        card = page.locator('.card.approval[data-interrupt="call-refund"]')
        await card.wait_for()
        assert "refund_order" in await card.inner_text()
        await page.locator("#graph").evaluate("img => img.decode()")
        marker = await page.evaluate("window.__marker = Math.random()")
        await page.locator("#live.on").wait_for()  # the replay is over; the stream waits
        await page.screenshot(
            path=str(SCREENSHOTS / "inspector-session-approval.png"), full_page=True
        )

        await card.locator("button.approve").click()
        result = page.locator("li.message.tool", has_text="refunded 500 cents on A1")
        await result.wait_for()
        answer = page.locator("li.message.assistant", has_text="Refund: refunded 500 cents")
        await answer.wait_for()
        await card.wait_for(state="detached")
        assert await page.evaluate("window.__marker") == marker  # never reloaded
        assert await answer.count() == 1
        # The stream delivers the whole turn, reconnecting every 2 events, with no repeat.
        stats = await eventually(
            lambda: page.evaluate("window.inspectorStats"),
            lambda stats: "turn_completed" in stats["types"],
            description="turn_completed on the page's stream",
        )
        assert stats["connects"] >= 3, stats
        assert stats["duplicates"] == 0, stats
        assert {"interrupt_resolved", "tool_call_finished", "text_delta"} <= set(stats["types"])
        assert stats["types"].count("turn_completed") == 1, stats
        await page.locator("#graph").evaluate("img => img.decode()")
        await page.locator("#live.on").wait_for()
        await page.screenshot(path=str(SCREENSHOTS / "inspector-session-done.png"), full_page=True)

        # Send asks for another refund; Steer withdraws its approval with new text.
        await page.fill("#message", "Please refund 900 cents on order A1.")
        await page.locator("#send").click()
        await card.wait_for()
        await page.fill("#message", "Actually, keep the money. Where is order A6?")
        await page.locator("#steer").click()
        await page.locator("li.message.assistant", has_text="headset").wait_for()
        await card.wait_for(state="detached")
        assert await page.evaluate("window.__marker") == marker
    snapshot = await snapshot_when(sessions, "refund-a1", turn_done(2))
    assert not snapshot.pending_interrupts
    last = snapshot.messages[-1].text or ""
    assert last.startswith("Order status:") and "headset" in last
    assert not any("900 cents" in (m.tool_output or "") for m in snapshot.messages)


def _attacker(target: str) -> Starlette:
    """A page of another origin (another port: the same site) that posts to the inspector."""

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(
            f'<form id="f" method="post" action="{target}" enctype="text/plain">'
            '<input name=\'{"approved": true, "x": "\' value=\'"}\'></form>'
            '<script>document.getElementById("f").submit()</script>'
        )

    return Starlette(routes=[Route("/", page)])


async def test_questions_script_text_tokens_and_cross_site_posts(engine_factory: Any) -> None:
    engine, sessions = await start_example_sessions(engine_factory, extra={"xss": SCRIPT_TEXT})
    app = build_inspector_app(engine.client, [sessions.flow], token=TOKEN)
    async with serving(app) as base, chromium() as browser:
        # No token: 401, in a browser with no cookie.
        stranger = await new_page(browser)
        response = await stranger.goto(f"{base}/sessions/refund-a1")
        assert response is not None and response.status == 401
        assert "401 Unauthorized" in await stranger.inner_text("body")

        page = await new_page(browser)
        await page.goto(f"{base}/sessions/which-order?token={TOKEN}")
        card = page.locator(".card.question-card")
        await card.wait_for()
        assert "Which order is it about" in await card.inner_text()
        await page.locator("#graph").evaluate("img => img.decode()")
        await page.screenshot(
            path=str(SCREENSHOTS / "inspector-session-question.png"), full_page=True
        )
        # The open orders are the choices; a choice answers, and the desk looks it up.
        choices = await card.locator("button.choice").all_inner_texts()
        assert [c.split(":")[0] for c in choices] == ["A2", "A3", "A6", "A8"]
        await card.locator("button.choice", has_text="A3").click()
        # The stored answer (not the streaming preview of it, nor the ask_user call,
        # whose choices also name the monitor arm).
        answer = page.locator("li.message.assistant:not(.streaming)", has_text="Order status")
        await answer.wait_for()
        assert "monitor arm" in await answer.inner_text()
        await card.wait_for(state="detached")

        # Message text is text: the <script> is shown, never run, never an element;
        # so is a free-text answer with one, shown as the question's result.
        await page.goto(f"{base}/sessions/xss")
        user = page.locator("li.message.user", has_text="<script>")
        await user.wait_for()
        assert SCRIPT_TEXT in await user.inner_text()
        card = page.locator(".card.question-card")
        await card.locator("input.free-text").fill(SCRIPT_TEXT)
        # A refresh (any event brings one) keeps the card: the typed answer and its focus stay.
        refreshes = await page.evaluate("window.inspectorStats.snapshots")
        await page.evaluate("scheduleRefresh()")
        await eventually(
            lambda: page.evaluate("window.inspectorStats.snapshots"),
            lambda count: count > refreshes,
            description="the page's refresh",
        )
        assert await card.locator("input.free-text").input_value() == SCRIPT_TEXT
        assert await page.evaluate("document.activeElement.classList.contains('free-text')")
        await card.locator("button.answer").click()
        output = page.locator("li.message.tool", has_text="<script>")
        await shown(output, sessions, "xss")
        # The answer is inside the tool's JSON output (its quotes escaped).
        assert SCRIPT_TEXT.split('"')[0] in await output.inner_text()
        await page.locator("li.message.assistant", has_text="I need an order ID").wait_for()
        assert await page.locator("#transcript script, #transcript img").count() == 0
        assert await page.evaluate("window.__pwned") is None

        # A page on another port of the same host (same site, so the SameSite cookie
        # goes along) submits a form to the approval route: refused, nothing changes.
        target = f"{base}/api/sessions/refund-a1/interrupts/call-refund/resolve"
        async with serving(_attacker(target)) as evil:
            victim = await page.context.new_page()
            async with victim.expect_response(target) as posted:
                await victim.goto(evil)
            assert (await posted.value).status == 403
            assert "cross-site request refused" in await victim.inner_text("body")
        snapshot = await snapshot_when(sessions, "refund-a1", has_interrupt)
        assert snapshot.pending_interrupts[0].interrupt_id == "call-refund"

        # Stop turn cancels the waiting turn: the approval goes away without a reload.
        await page.goto(f"{base}/sessions/refund-a1")
        card = page.locator('.card.approval[data-interrupt="call-refund"]')
        await card.wait_for()
        await page.locator("#stop").click()
        await card.wait_for(state="detached")
        await page.locator("#stop:disabled").wait_for()
        await eventually(
            lambda: page.evaluate("window.inspectorStats"),
            lambda stats: "turn_cancelled" in stats["types"],
            description="turn_cancelled on the page's stream",
        )

        # Send queues a message that starts the next turn; its answer streams in.
        await page.fill("#message", "Hello from the page: where is order A8?")
        await page.locator("#send").click()
        await page.locator("li.message.assistant", has_text="usb hub").wait_for()
    snapshot = await snapshot_when(sessions, "refund-a1", turn_done(2))
    assert not snapshot.pending_interrupts
