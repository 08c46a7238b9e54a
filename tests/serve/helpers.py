"""Serving an ASGI app on loopback, and headless Chromium (Debian's, driven by Playwright)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn

from tests.engine.polling import until

CHROMIUM = os.environ.get("DEX_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "images"


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yields its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1
        )
    )
    task = asyncio.create_task(server.serve())
    try:

        async def started() -> bool:
            if task.done():
                task.result()
            return bool(server.started)

        await until(started, "uvicorn serving")
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    """Headless Chromium (Playwright driving ``/usr/bin/chromium``, each launch with a
    fresh profile of its own); yields the browser, whose contexts share nothing."""
    from playwright.async_api import async_playwright

    if not os.path.exists(CHROMIUM):  # noqa: ASYNC240 - one stat before the launch
        raise AssertionError(f"{CHROMIUM} is missing: run scripts/services (it installs chromium)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


async def new_page(browser: Any) -> Any:
    context = await browser.new_context(viewport={"width": 1360, "height": 900})
    return await context.new_page()


async def shown(locator: Any, sessions: Any = None, session_id: str | None = None) -> None:
    """Wait for ``locator`` to show; on a timeout, fail with what the page and the
    session held then (the page's stream stats, its action result and transcript,
    and the stored snapshot), so that a failure in a long run says where it stopped."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    try:
        await locator.wait_for()
    except PlaywrightTimeout as error:
        page = locator.page
        stats = await page.evaluate("window.inspectorStats || null")
        result = await page.locator("#action-result").all_inner_texts()
        transcript = await page.locator("#transcript").all_inner_texts()
        stored = None
        if sessions is not None and session_id is not None:
            snapshot = await sessions.get_agent_snapshot(session_id)
            stored = {
                "state": snapshot.state,
                "pending": [i.interrupt_id for i in snapshot.pending_interrupts],
                "messages": [
                    (m.role, (m.text or m.tool_output or "")[:80]) for m in snapshot.messages
                ],
            }
        raise AssertionError(
            f"{locator} did not show: {error}\npage stats: {stats}\naction result: {result}\n"
            f"transcript: {transcript}\nstored: {stored}"
        ) from error
