"""MCP tasks: tool tasks polled by the session, tasks polled in the Step, and their
input requests, driven poll by poll against a real server."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from dex_agents_ray import (
    QuestionAnswer,
    QuestionResolution,
    ToolExecutionError,
    ToolExecutionResult,
    ToolInputRequested,
    ToolOutcomeUnknownError,
    ToolTaskCancellation,
    ToolTaskPending,
    ToolTaskStarted,
)
from dex_agents_ray.mcp import (
    McpStreamableHttpServerConfig,
    McpToolCallInterruptedError,
    McpToolSource,
)
from tests.mcp.mcp_server import HttpMcpServer
from tests.mcp.support import Recorded, deferred, poll_of, source, stdio_server


@pytest.fixture
async def tools(mcp_http: HttpMcpServer) -> McpToolSource:
    listed = source(
        [McpStreamableHttpServerConfig(name="t", url=mcp_http.url)],
        task_wait_timeout=timedelta(seconds=1),
    )
    await listed.list_tools()
    return listed


async def _start(tools: McpToolSource, tool: str, arguments: str = "{}") -> tuple[Any, str]:
    call = deferred(tools, tool, arguments)
    started = await tools.execute_deferred_tool_call(call)
    assert isinstance(started, ToolTaskStarted)
    return call, started.task_id


async def test_an_http_task_becomes_a_tool_task_that_resumes_from_its_checkpoint(
    tools: McpToolSource, mcp_http: HttpMcpServer
) -> None:
    recorded = Recorded()
    call = deferred(tools, "t__task_write", recorded=recorded)

    started = await tools.execute_deferred_tool_call(call)

    assert isinstance(started, ToolTaskStarted) and started.poll_interval_seconds == 1
    [checkpoint] = recorded.checkpoints
    assert json.loads(checkpoint) == {"mcp_task": started.task_id, "poll_interval_seconds": 1}
    retry = deferred(tools, "t__task_write", checkpoint=checkpoint, attempt=2)
    assert tools.will_resume_tool_task_without_sending(retry)
    assert not tools.will_resume_tool_task_without_sending(deferred(tools, "t__task_write"))
    no_poller = deferred(tools, "t__task_write", checkpoint=checkpoint, supports_tool_tasks=False)
    assert not tools.will_resume_tool_task_without_sending(no_poller)
    resumed = await tools.execute_deferred_tool_call(retry)
    assert resumed == started
    assert len(mcp_http.state.called("task_write")) == 1  # never sent again

    polls = Recorded()
    first = await tools.poll_tool_task(poll_of(call, started.task_id, recorded=polls))
    assert isinstance(first, ToolTaskPending) and first.poll_interval_seconds == 2
    second = await tools.poll_tool_task(
        poll_of(call, started.task_id, recorded=polls, continuation=first.continuation, interval=2)
    )
    assert isinstance(second, ToolExecutionResult) and second.output == "task_write done"
    statuses = [(e["status"], e["task_id"]) for e in polls.of_type("mcp.task_status")]
    assert statuses == [("working", started.task_id), ("completed", started.task_id)]


async def test_tasks_are_polled_in_the_step_without_a_poller_and_on_stdio(
    tools: McpToolSource, mcp_http: HttpMcpServer
) -> None:
    recorded = Recorded()
    stdio = source([stdio_server("s")])
    await stdio.list_tools()

    in_step = await tools.execute_deferred_tool_call(
        deferred(tools, "t__task_quick", recorded=recorded, supports_tool_tasks=False)
    )
    on_stdio = await stdio.execute_deferred_tool_call(deferred(stdio, "s__task_quick"))
    with pytest.raises(McpToolCallInterruptedError, match="did not finish within 1 s"):
        await tools.execute_deferred_tool_call(
            deferred(tools, "t__task_gated", supports_tool_tasks=False)
        )
    with pytest.raises(ToolExecutionError, match=r"cannot provide yet \(an answer to 'Which"):
        await tools.execute_deferred_tool_call(
            deferred(tools, "t__task_ask", supports_tool_tasks=False)
        )

    assert isinstance(in_step, ToolExecutionResult) and in_step.output == "task_quick done"
    assert isinstance(on_stdio, ToolExecutionResult) and on_stdio.output == "task_quick done"
    assert [e["status"] for e in recorded.of_type("mcp.task_status")] == ["working", "completed"]
    assert recorded.heartbeats >= 2
    kinds = {t.task_id: t.kind for t in mcp_http.state.tasks.values()}
    assert [kinds[task_id] for task_id in mcp_http.state.cancels] == ["task_gated", "task_ask"]


@pytest.mark.parametrize(
    ("tool", "raised", "text"),
    [
        (
            "t__task_fail",
            ToolExecutionError,
            "the MCP task failed: MCP error -32603: the job exploded",
        ),
        ("t__task_cancelled", ToolExecutionError, "the MCP task was cancelled: an operator"),
        ("t__task_forgotten", ToolOutcomeUnknownError, "the MCP server no longer knows task"),
        ("t__task_url", ToolExecutionError, "cannot provide yet (a visit to 'https://example"),
    ],
)
async def test_tasks_that_end_badly(
    tools: McpToolSource, mcp_http: HttpMcpServer, tool: str, raised: type[Exception], text: str
) -> None:
    call, task_id = await _start(tools, tool)

    with pytest.raises(raised) as error:
        await tools.poll_tool_task(poll_of(call, task_id, recorded=Recorded()))

    assert text in str(error.value)
    assert mcp_http.state.cancels == ([task_id] if tool == "t__task_url" else [])


def _answer(continuation: str | None, answer: str | None = None, **kwargs: Any) -> QuestionAnswer:
    resolution = kwargs.get("resolution", QuestionResolution.ANSWERED)
    return QuestionAnswer(
        interrupt_id="c1-input-1", resolution=resolution, answer=answer, continuation=continuation
    )


@pytest.mark.parametrize(
    ("kind", "choices", "answer", "content"),
    [
        ("enum", ("red", "blue"), "blue", {"answer": "blue"}),
        ("boolean", ("yes", "no"), "yes", {"answer": True}),
        ("string", (), "teal", {"answer": "teal"}),
    ],
)
async def test_an_elicitation_is_a_question_whose_answer_is_sent_once(
    tools: McpToolSource,
    mcp_http: HttpMcpServer,
    kind: str,
    choices: tuple[str, ...],
    answer: str,
    content: dict[str, Any],
) -> None:
    call, task_id = await _start(tools, "t__task_ask", json.dumps({"kind": kind}))
    recorded = Recorded()

    asked = await tools.poll_tool_task(poll_of(call, task_id, recorded=recorded))
    assert isinstance(asked, ToolInputRequested)
    assert (asked.question, tuple(asked.choices)) == ("Which colour?", choices)
    assert asked.allows_free_text is (not choices)
    resolved = _answer(asked.continuation, answer)
    retried = await tools.poll_tool_task(
        poll_of(
            call,
            task_id,
            recorded=recorded,
            continuation=asked.continuation,
            answer=resolved,
            attempt=2,
        )
    )
    assert isinstance(retried, ToolInputRequested)  # a retry asks again, never sends
    assert mcp_http.state.updates == []

    sent = await tools.poll_tool_task(
        poll_of(call, task_id, recorded=recorded, continuation=asked.continuation, answer=resolved)
    )
    assert isinstance(sent, ToolTaskPending) and sent.poll_interval_seconds == 1
    assert mcp_http.state.updates == [
        (task_id, {"ask-1": {"action": "accept", "content": content}})
    ]
    assert recorded.heartbeats == 1
    done = await tools.poll_tool_task(
        poll_of(call, task_id, recorded=recorded, continuation=sent.continuation)
    )
    assert isinstance(done, ToolExecutionResult)
    assert done.output == f"painted {json.dumps(content, sort_keys=True)}"


async def test_a_declined_question_ends_the_task_and_fails_the_poll(
    tools: McpToolSource, mcp_http: HttpMcpServer
) -> None:
    call, task_id = await _start(tools, "t__task_ask")
    recorded = Recorded()
    asked = await tools.poll_tool_task(poll_of(call, task_id, recorded=recorded))
    assert isinstance(asked, ToolInputRequested)

    declined = _answer(asked.continuation, resolution=QuestionResolution.DECLINED)
    sent = await tools.poll_tool_task(
        poll_of(call, task_id, recorded=recorded, continuation=asked.continuation, answer=declined)
    )
    assert isinstance(sent, ToolTaskPending)
    with pytest.raises(RuntimeError, match="cancelled after its question was declined"):
        await tools.poll_tool_task(
            poll_of(call, task_id, recorded=recorded, continuation=sent.continuation)
        )

    assert mcp_http.state.updates == [(task_id, {"ask-1": {"action": "decline"}})]


async def test_an_answered_request_still_listed_reads_as_working_for_ten_seconds(
    tools: McpToolSource,
) -> None:
    call, task_id = await _start(tools, "t__task_ask")
    asked = await tools.poll_tool_task(poll_of(call, task_id, recorded=Recorded()))
    assert isinstance(asked, ToolInputRequested) and asked.continuation is not None
    state = json.loads(asked.continuation)

    def sent(seconds_ago: float) -> str:
        return json.dumps({**state, "sent_at": time.time() - seconds_ago, "sent_action": "accept"})

    settling = await tools.poll_tool_task(
        poll_of(call, task_id, recorded=Recorded(), continuation=sent(1))
    )
    later = await tools.poll_tool_task(
        poll_of(call, task_id, recorded=Recorded(), continuation=sent(11))
    )

    assert isinstance(settling, ToolTaskPending) and settling.poll_interval_seconds == 1
    assert isinstance(later, ToolInputRequested) and later.question == "Which colour?"


async def test_unsupported_questions_fail_and_cancel_the_task(
    tools: McpToolSource, mcp_http: HttpMcpServer
) -> None:
    call, task_id = await _start(tools, "t__task_ask", json.dumps({"kind": "two_fields"}))

    with pytest.raises(
        ToolExecutionError, match=r"cannot provide yet \(an answer to 'Which colour"
    ):
        await tools.poll_tool_task(poll_of(call, task_id, recorded=Recorded()))

    assert mcp_http.state.cancels == [task_id]


async def test_cancel_tool_task_sends_tasks_cancel_and_any_answer_ends_it(
    tools: McpToolSource, mcp_http: HttpMcpServer
) -> None:
    call, task_id = await _start(tools, "t__task_gated")
    record = poll_of(call, task_id, recorded=Recorded()).tool_call

    for task in (task_id, "no-such-task"):
        waiting = replace(record, task_id=task)
        await tools.cancel_tool_task(
            ToolTaskCancellation(
                flow_id="flow-1", tool_call=waiting, idempotency_key="k", attempt=1
            )
        )

    assert mcp_http.state.cancels == [task_id, "no-such-task"]
    assert mcp_http.state.tasks[task_id].status == "cancelled"
