"""@function_tool: names, descriptions, argument checks, prepare_arguments, sync and async."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    FunctionTool,
    FunctionToolResult,
    ModelToolDefinition,
    ToolCallContext,
    function_tool,
)
from dex_agents_ray.media import build_image_reference
from dex_agents_ray.session import ToolEffect, ToolExecutionError, ToolPolicy

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)


@dataclass
class Refund:
    order_id: str
    amount_cents: int


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def refund_order(refund: Refund, context: ToolCallContext) -> str:
    """Refund part of an order."""
    return f"{refund.order_id}:{refund.amount_cents}:{context.idempotency_key}"


def test_defaults_come_from_the_function() -> None:
    assert isinstance(refund_order, FunctionTool)
    assert refund_order.name == "refund_order"
    assert refund_order.description == "Refund part of an order."
    assert refund_order.policy == ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)
    assert refund_order.definition() == ModelToolDefinition(
        name="refund_order",
        description="Refund part of an order.",
        parameters_schema=refund_order.parameters_schema,
    )
    assert repr(refund_order) == "FunctionTool(name='refund_order', effect='non_idempotent_write')"


def test_overrides_and_direct_call() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }

    def search(q: str) -> list[str]:
        return [q]

    tool = function_tool(
        search,
        effect=ToolEffect.READ,
        requires_approval=True,
        name="find-things",
        description="Find things.",
        parameters_schema=schema,
    )
    assert (tool.name, tool.description, tool.parameters_schema) == (
        "find-things",
        "Find things.",
        schema,
    )
    assert tool.policy.approval_required is True
    assert tool("x") == ["x"]


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.not.allowed"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="must be 1 to 64 letters"):
        function_tool(effect=ToolEffect.READ, name=name)(lambda: "")


async def test_arguments_are_decoded_into_hinted_values() -> None:
    context = ToolCallContext(idempotency_key="s/turn-1/c1")
    result = await refund_order.invoke(
        '{"refund": {"order_id": "A1", "amount_cents": 250.0}}', context
    )
    assert result == "A1:250:s/turn-1/c1"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("{not json", "invalid arguments for refund_order: arguments are not valid JSON"),
        ("[]", "invalid arguments for refund_order: arguments: expected object, got array"),
        ("{}", "invalid arguments for refund_order: arguments: missing required property 'refund'"),
        (
            '{"refund": {"order_id": 7, "amount_cents": 1}}',
            "invalid arguments for refund_order: arguments.refund.order_id: expected string, "
            "got integer",
        ),
        (
            '{"refund": {"order_id": "A", "amount_cents": 1}, "extra": 1}',
            "invalid arguments for refund_order: arguments: unexpected property 'extra'",
        ),
    ],
)
async def test_bad_arguments_raise_tool_execution_error(arguments: str, message: str) -> None:
    with pytest.raises(ToolExecutionError) as raised:
        await refund_order.invoke(arguments, ToolCallContext())
    assert raised.value.message == message


async def test_blank_arguments_are_an_empty_object() -> None:
    @function_tool(effect=ToolEffect.READ)
    async def ping() -> str:
        return "pong"

    assert await ping.invoke("", ToolCallContext()) == "pong"


async def test_prepare_arguments_converts_before_the_check() -> None:
    seen: list[Any] = []

    def upgrade(arguments: Any) -> Any:
        seen.append(arguments)
        if "order" in arguments:  # the shape version 1 of the tool took
            return {"refund": {"order_id": arguments["order"], "amount_cents": 0}}
        return arguments

    tool = function_tool(effect=ToolEffect.READ, prepare_arguments=upgrade)(refund_order.function)
    assert await tool.invoke('{"order": "B2"}', ToolCallContext()) == "B2:0:"
    assert seen == [{"order": "B2"}]


async def test_prepare_arguments_failures() -> None:
    def broken(arguments: Any) -> Any:
        raise KeyError("order")

    tool = function_tool(effect=ToolEffect.READ, prepare_arguments=broken)(refund_order.function)
    with pytest.raises(ToolExecutionError) as raised:
        await tool.invoke("{}", ToolCallContext())
    assert raised.value.message == (
        "invalid arguments for refund_order: prepare_arguments raised KeyError: 'order'"
    )

    async def later(arguments: Any) -> Any:
        return arguments

    def returns_awaitable(arguments: Any) -> Any:
        return later(arguments)

    tool = function_tool(effect=ToolEffect.READ, prepare_arguments=returns_awaitable)(
        refund_order.function
    )
    with pytest.raises(ToolExecutionError, match="returned an awaitable"):
        await tool.invoke("{}", ToolCallContext())

    with pytest.raises(TypeError, match="must be synchronous"):
        function_tool(effect=ToolEffect.READ, prepare_arguments=later)(refund_order.function)

    def cancelled(arguments: Any) -> Any:
        raise asyncio.CancelledError

    tool = function_tool(effect=ToolEffect.READ, prepare_arguments=cancelled)(refund_order.function)
    with pytest.raises(asyncio.CancelledError):
        await tool.invoke("{}", ToolCallContext())


async def test_sync_functions_run_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()

    @function_tool(effect=ToolEffect.READ)
    def where(label: str) -> dict[str, object]:
        return {"label": label, "off_loop": threading.get_ident() != loop_thread}

    assert await where.invoke('{"label": "x"}', ToolCallContext()) == {
        "label": "x",
        "off_loop": True,
    }


async def test_tool_errors_propagate_unchanged() -> None:
    @function_tool(effect=ToolEffect.READ)
    async def fails() -> str:
        raise ToolExecutionError("order not found")

    with pytest.raises(ToolExecutionError, match="order not found"):
        await fails.invoke("{}", ToolCallContext())


def test_context_defaults_and_error_reporting_rule() -> None:
    context = ToolCallContext()
    assert context.effect is ToolEffect.UNCLASSIFIED
    assert context.attempt == 1 and context.input_answers == () and context.media_store is None
    assert context.may_report_errors_as_failures is False
    safe = {ToolEffect.READ, ToolEffect.IDEMPOTENT_WRITE}
    for effect in ToolEffect:
        assert ToolCallContext(effect=effect).may_report_errors_as_failures is (effect in safe)


def test_function_tool_result_checks_its_fields() -> None:
    reference = build_image_reference(PNG, "memory://images")
    result = FunctionToolResult(output="Took a screenshot.", images=[reference])
    assert result.images == (reference,)
    with pytest.raises(TypeError):
        FunctionToolResult(output="x", images=["not a reference"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        FunctionToolResult(output=1)  # type: ignore[arg-type]
