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
from tests.serve.helpers import SCREENSHOTS, chromium, new_page, serving
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
        await page.locator('tr[data-session="refund-7"] a').click()

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
        result = page.locator("li.message.tool", has_text="refunded 500 cents on order 7")
        await result.wait_for()
        answer = page.locator("li.message.assistant", has_text="Done: refunded 500 cents")
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
        await page.fill("#message", "Please refund 9 EUR on order 7.")
        await page.locator("#send").click()
        await card.wait_for()
        await page.fill("#message", "Actually, keep the money.")
        await page.locator("#steer").click()
        await page.locator("li.message.assistant", has_text="You said: Actually, keep").wait_for()
        await card.wait_for(state="detached")
        assert await page.evaluate("window.__marker") == marker
    snapshot = await snapshot_when(sessions, "refund-7", turn_done(2))
    assert not snapshot.pending_interrupts
    assert snapshot.messages[-1].text == "You said: Actually, keep the money."


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
        response = await stranger.goto(f"{base}/sessions/refund-7")
        assert response is not None and response.status == 401
        assert "401 Unauthorized" in await stranger.inner_text("body")

        page = await new_page(browser)
        await page.goto(f"{base}/sessions/account-question?token={TOKEN}")
        card = page.locator(".card.question-card")
        await card.wait_for()
        assert "Which account should I use?" in await card.inner_text()
        await page.locator("#graph").evaluate("img => img.decode()")
        await page.screenshot(
            path=str(SCREENSHOTS / "inspector-session-question.png"), full_page=True
        )
        await card.locator("button.choice", has_text="savings").click()
        # The stored answer (not the streaming preview of it, nor the ask_user call,
        # whose choices also say "savings").
        answer = page.locator("li.message.assistant:not(.streaming)", has_text="I will use")
        await answer.wait_for()
        assert "savings" in await answer.inner_text()
        await card.wait_for(state="detached")

        # Message text is text: the <script> is shown, never run, never an element.
        await page.goto(f"{base}/sessions/xss")
        user = page.locator("li.message.user", has_text="<script>")
        await user.wait_for()
        assert SCRIPT_TEXT in await user.inner_text()
        await page.locator("li.message.assistant", has_text="You said: <script>").wait_for()
        assert await page.locator("#transcript script, #transcript img").count() == 0
        assert await page.evaluate("window.__pwned") is None

        # A page on another port of the same host (same site, so the SameSite cookie
        # goes along) submits a form to the approval route: refused, nothing changes.
        target = f"{base}/api/sessions/refund-7/interrupts/call-refund/resolve"
        async with serving(_attacker(target)) as evil:
            victim = await page.context.new_page()
            async with victim.expect_response(target) as posted:
                await victim.goto(evil)
            assert (await posted.value).status == 403
            assert "cross-site request refused" in await victim.inner_text("body")
        snapshot = await snapshot_when(sessions, "refund-7", has_interrupt)
        assert snapshot.pending_interrupts[0].interrupt_id == "call-refund"

        # Stop turn cancels the waiting turn: the approval goes away without a reload.
        await page.goto(f"{base}/sessions/refund-7")
        card = page.locator('.card.approval[data-interrupt="call-refund"]')
        await card.wait_for()
        await page.locator("#stop").click()
        await card.wait_for(state="detached")
        await page.locator("#stop:disabled").wait_for()
        stats = await page.evaluate("window.inspectorStats")
        assert "turn_cancelled" in stats["types"], stats

        # Send queues a message that starts the next turn; its answer streams in.
        await page.fill("#message", "hello from the page")
        await page.locator("#send").click()
        await page.locator(
            "li.message.assistant", has_text="You said: hello from the page"
        ).wait_for()
    snapshot = await snapshot_when(sessions, "refund-7", turn_done(2))
    assert not snapshot.pending_interrupts
