"""``@function_tool``: plain sync or async functions as agent tools.

Errors::

    TypeError / ValueError    misuse when the tool is defined (a bad name, an
                              unsupported type hint, an async prepare_arguments)
    ToolExecutionError        the model's arguments are not JSON, break the
                              schema, or prepare_arguments refused them; the
                              model reads the message and the call is ``failed``
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, overload

from dex_agents_ray.builtin_loop._model import JsonValue, ModelToolDefinition
from dex_agents_ray.builtin_loop._schema import decode_value, schema_for_hint
from dex_agents_ray.builtin_loop._validation import SchemaViolation, validate_json_value
from dex_agents_ray.media import AgentImageReference, MediaStore
from dex_agents_ray.session import (
    AgentEventWriter,
    QuestionAnswer,
    ToolCallStepOptions,
    ToolEffect,
    ToolExecutionError,
    ToolPolicy,
)

__all__ = [
    "FunctionTool",
    "FunctionToolResult",
    "ToolCallContext",
    "function_tool",
    "invalid_arguments_error",
]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SAFE_TO_REPORT = frozenset({ToolEffect.READ, ToolEffect.IDEMPOTENT_WRITE})

P = ParamSpec("P")
R = TypeVar("R")


async def _no_heartbeat() -> None:
    return None


def _dropping_events() -> AgentEventWriter:
    """An event writer that drops everything: the default of a hand-built context."""
    writer = AgentEventWriter(lambda event: None, turn_id=None, step_execution_id="", attempt=1)
    writer.close()
    return writer


@dataclass(frozen=True, kw_only=True)
class ToolCallContext:
    """What a function tool knows about its call.

    A parameter typed ``ToolCallContext`` receives it; it is not part of the
    tool's JSON Schema. The runner builds it from ``DeferredToolExecution``;
    tests can build one by hand, where every field has a default.
    """

    flow_id: str = ""
    """The session ID."""
    turn_id: str = ""
    """The turn (``"turn-<n>"``)."""
    tool_call_id: str = ""
    """The model's ID of this call."""
    tool_name: str = ""
    """The name the model called."""
    idempotency_key: str = ""
    """``"<flow_id>/<turn_id>/<tool_call_id>"``, the same on every attempt: pass it
    on to the system the tool writes to."""
    attempt: int = 1
    """The one-based attempt of the tool Step."""
    effect: ToolEffect = ToolEffect.UNCLASSIFIED
    """The call's effect after the tool policies, which chose its tool Step."""
    events: AgentEventWriter = field(default_factory=_dropping_events)
    """The session's ``AgentEventWriter`` for this attempt (``write_event`` and the
    text deltas); a writer that drops everything in a hand-built context."""
    heartbeat: Callable[[], Awaitable[None]] = _no_heartbeat
    """Records liveness of a long call; the session also heartbeats every 20 seconds."""
    input_answers: tuple[QuestionAnswer, ...] = ()
    """How the questions this call asked ended, oldest first; empty before any."""
    input_continuation: str | None = None
    """The ``continuation`` of the question answered last; ``None`` for none."""
    media_store: MediaStore | None = None
    """The runner's media store, for images the tool returns; ``None`` without one."""

    @property
    def may_report_errors_as_failures(self) -> bool:
        """Whether a wrapper may turn this call's unexpected errors into ``ToolExecutionError``.

        ``True`` for ``READ`` and ``IDEMPOTENT_WRITE``. ``False`` for
        ``NON_IDEMPOTENT_WRITE`` and ``UNCLASSIFIED`` (the default of a
        hand-built context): such a call may have taken effect before it
        failed, so the error must propagate and the session records
        ``outcome_unknown`` instead of a ``failed`` the model could retry.

        Example::

            try:
                return await client.send(order_id)
            except ClientError as error:
                if context.may_report_errors_as_failures:
                    raise ToolExecutionError(str(error)) from error
                raise
        """
        return self.effect in _SAFE_TO_REPORT


@dataclass(frozen=True, kw_only=True)
class FunctionToolResult:
    """A function tool's output text with images it uploaded to ``context.media_store``."""

    output: str
    """The model-visible output text."""
    images: Sequence[AgentImageReference] = ()
    """References from ``MediaStore.put_image``, shown after the text; empty for none."""

    def __post_init__(self) -> None:
        if not isinstance(self.output, str):
            raise TypeError("FunctionToolResult.output must be a str")
        if isinstance(self.images, str | bytes) or not isinstance(self.images, Sequence):
            raise TypeError("FunctionToolResult.images must be a sequence of AgentImageReference")
        images = tuple(self.images)
        for image in images:
            if not isinstance(image, AgentImageReference):
                raise TypeError("FunctionToolResult.images holds only AgentImageReference values")
        object.__setattr__(self, "images", images)


def invalid_arguments_error(tool_name: str, reason: str) -> ToolExecutionError:
    """The ``ToolExecutionError`` for arguments the tool cannot take."""
    return ToolExecutionError(f"invalid arguments for {tool_name}: {reason}")


@dataclass(frozen=True)
class _Parameter:
    name: str
    hint: Any
    has_default: bool


def _is_context_hint(hint: Any) -> bool:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint is ToolCallContext


class FunctionTool(Generic[P, R]):
    """A tool made from a function by :func:`function_tool`.

    Calling the object calls the function unchanged, so it stays usable
    directly; the runner uses :meth:`invoke`.

    Attributes:
        name: The tool name the model calls.
        description: What the tool does, for the model.
        parameters_schema: The JSON Schema of the arguments object.
        effect: The tool's effect class when no session tool policy names it.
        requires_approval: ``None`` uses the effect's default approval.
        function: The wrapped function.
        prepare_arguments: Converts the decoded arguments before the schema check.
        step_options: The tool Step's own options (timeout, retry policy, Ray
            resources, or running inline in the session's host); ``None`` keeps
            the session's.
    """

    def __init__(
        self,
        function: Callable[P, R],
        *,
        effect: ToolEffect,
        requires_approval: bool | None = None,
        name: str | None = None,
        description: str | None = None,
        parameters_schema: Mapping[str, JsonValue] | None = None,
        prepare_arguments: Callable[[Any], Any] | None = None,
        step_options: ToolCallStepOptions | None = None,
    ) -> None:
        if not callable(function):
            raise TypeError("function_tool needs a function")
        self.function = function
        self.effect = ToolEffect(effect)
        if requires_approval is not None and not isinstance(requires_approval, bool):
            raise TypeError("function_tool requires_approval must be a bool or None")
        self.requires_approval = requires_approval
        self.name = name if name is not None else getattr(function, "__name__", "")
        if not isinstance(self.name, str) or not _TOOL_NAME.match(self.name):
            raise ValueError(
                f"function_tool name {self.name!r} must be 1 to 64 letters, digits, '_' or '-'"
            )
        if description is None:
            description = inspect.getdoc(function) or ""
        if not isinstance(description, str):
            raise TypeError(f"function_tool {self.name} description must be a str")
        self.description = description
        if prepare_arguments is not None:
            if not callable(prepare_arguments):
                raise TypeError(f"function_tool {self.name} prepare_arguments must be callable")
            if inspect.iscoroutinefunction(prepare_arguments):
                raise TypeError(
                    f"function_tool {self.name} prepare_arguments must be synchronous, "
                    "not an async function"
                )
        self.prepare_arguments = prepare_arguments
        if step_options is not None and not isinstance(step_options, ToolCallStepOptions):
            raise TypeError(f"function_tool {self.name} step_options must be ToolCallStepOptions")
        self.step_options = step_options
        self._parameters, self._context_parameter = self._read_signature()
        derived = self._derive_schema()
        if parameters_schema is not None:
            if not isinstance(parameters_schema, Mapping):
                raise TypeError(f"function_tool {self.name} parameters_schema must be a mapping")
            self.parameters_schema: Mapping[str, JsonValue] = parameters_schema
        else:
            self.parameters_schema = derived
        self._schema_is_derived = parameters_schema is None
        self._is_async = _is_async_callable(function)
        self.__doc__ = getattr(function, "__doc__", None)
        self.__wrapped__ = function

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r}, effect={self.effect.value!r})"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the wrapped function directly."""
        return self.function(*args, **kwargs)

    @property
    def policy(self) -> ToolPolicy:
        """The tool's own policy: its effect and approval setting."""
        return ToolPolicy(self.effect, self.requires_approval)

    def definition(self) -> ModelToolDefinition:
        """The definition offered to the model."""
        return ModelToolDefinition(
            name=self.name, description=self.description, parameters_schema=self.parameters_schema
        )

    def _read_signature(self) -> tuple[list[_Parameter], str | None]:
        where = f"function_tool {self.name}"
        try:
            hints = typing.get_type_hints(self.function, include_extras=True)
        except Exception as error:
            raise TypeError(f"{where}: cannot resolve its type hints: {error}") from error
        parameters: list[_Parameter] = []
        context_parameter: str | None = None
        for parameter in inspect.signature(self.function).parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(f"{where}: *args and **kwargs are not supported")
            if parameter.kind is parameter.POSITIONAL_ONLY:
                raise TypeError(f"{where}: positional-only parameter {parameter.name}")
            hint = hints.get(parameter.name, inspect.Parameter.empty)
            if _is_context_hint(hint):
                if context_parameter is not None:
                    raise TypeError(f"{where}: more than one ToolCallContext parameter")
                context_parameter = parameter.name
                continue
            has_default = parameter.default is not inspect.Parameter.empty
            parameters.append(_Parameter(parameter.name, hint, has_default))
        return parameters, context_parameter

    def _derive_schema(self) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        for parameter in self._parameters:
            where = f"function_tool {self.name}: parameter {parameter.name}"
            if parameter.hint is inspect.Parameter.empty:
                raise TypeError(f"{where} has no type hint")
            properties[parameter.name] = schema_for_hint(parameter.hint, where)
            if not parameter.has_default:
                required.append(parameter.name)
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }

    def decode_arguments(self, arguments: str) -> dict[str, Any]:
        """The keyword arguments for the function from the model's arguments text.

        Decodes the JSON (blank text counts as ``{}``), applies
        ``prepare_arguments``, checks the schema, and builds the hinted
        Python values.

        Raises:
            ToolExecutionError: The arguments are not JSON, ``prepare_arguments``
                refused them, or they break the schema.
        """
        try:
            value: Any = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise invalid_arguments_error(self.name, "arguments are not valid JSON") from None
        if self.prepare_arguments is not None:
            value = self._prepare(self.prepare_arguments, value)
        try:
            validate_json_value(value, self.parameters_schema)
        except SchemaViolation as violation:
            raise invalid_arguments_error(self.name, str(violation)) from None
        if not isinstance(value, dict):
            raise invalid_arguments_error(self.name, "arguments must be a JSON object")
        if not self._schema_is_derived:
            return value
        hints = {parameter.name: parameter.hint for parameter in self._parameters}
        try:
            return {key: decode_value(item, hints[key]) for key, item in value.items()}
        except Exception as error:  # a value the hinted class refuses, such as in __post_init__
            raise invalid_arguments_error(self.name, f"{type(error).__name__}: {error}") from error

    def _prepare(self, prepare: Callable[[Any], Any], value: Any) -> Any:
        try:
            prepared = prepare(value)
        except Exception as error:
            raise invalid_arguments_error(
                self.name, f"prepare_arguments raised {type(error).__name__}: {error}"
            ) from error
        if inspect.isawaitable(prepared):
            close = getattr(prepared, "close", None)
            if callable(close):
                close()  # never awaited: close it so it does not warn
            raise invalid_arguments_error(
                self.name, "prepare_arguments returned an awaitable; it must be synchronous"
            )
        return prepared

    async def invoke(self, arguments: str, context: ToolCallContext) -> object:
        """Decode ``arguments``, run the function once, and return what it returned.

        An async function runs on the event loop; a sync one runs in a worker
        thread, so it never blocks the loop.

        Raises:
            ToolExecutionError: The arguments are invalid (see
                :meth:`decode_arguments`), or the function raised it.
        """
        kwargs = self.decode_arguments(arguments)
        if self._context_parameter is not None:
            kwargs[self._context_parameter] = context
        call: Callable[..., Any] = self.function
        if self._is_async:
            result = await call(**kwargs)
        else:
            result = await asyncio.to_thread(call, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        return result


def _is_async_callable(function: object) -> bool:
    while isinstance(function, functools.partial):
        function = function.func
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(function, "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(call)


@overload
def function_tool(
    function: Callable[P, R],
    /,
    *,
    effect: ToolEffect,
    requires_approval: bool | None = None,
    name: str | None = None,
    description: str | None = None,
    parameters_schema: Mapping[str, JsonValue] | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    step_options: ToolCallStepOptions | None = None,
) -> FunctionTool[P, R]: ...


@overload
def function_tool(
    function: None = None,
    /,
    *,
    effect: ToolEffect,
    requires_approval: bool | None = None,
    name: str | None = None,
    description: str | None = None,
    parameters_schema: Mapping[str, JsonValue] | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    step_options: ToolCallStepOptions | None = None,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def function_tool(
    function: Callable[P, R] | None = None,
    /,
    *,
    effect: ToolEffect,
    requires_approval: bool | None = None,
    name: str | None = None,
    description: str | None = None,
    parameters_schema: Mapping[str, JsonValue] | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    step_options: ToolCallStepOptions | None = None,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Turn a plain sync or async function into a tool.

    The name defaults to the function name, the description to its
    docstring, and the JSON Schema is derived from the type hints: ``str``,
    ``int``, ``float``, ``bool``, ``None``, ``list``, ``dict``, ``Literal``,
    ``Enum``, unions, dataclasses, ``TypedDict`` and
    ``Annotated[T, "description"]``. A parameter typed
    :class:`ToolCallContext` receives the call's context instead.

    The result: a ``str`` is the output, a :class:`FunctionToolResult` adds
    images, a ``ToolInputRequested`` asks the user first (only before the tool
    took any effect), and anything else is serialized as JSON.

    Example::

        @function_tool(effect=ToolEffect.READ)
        async def lookup_order(order_id: Annotated[str, "The order's ID"]) -> dict[str, str]:
            \"\"\"Look up an order by its ID.\"\"\"
            return await orders.get(order_id)

    Args:
        function: The function, when not used as ``@function_tool(...)``.
        effect: The tool's effect class; a session tool policy for the name wins.
        requires_approval: ``None`` uses the effect's default approval.
        name: The tool name; defaults to the function name.
        description: What the tool does; defaults to the docstring.
        parameters_schema: A JSON Schema to use instead of the derived one; the
            function then receives the decoded JSON values as they are.
        prepare_arguments: A synchronous, deterministic function that converts
            the decoded arguments before the schema check, such as an argument
            shape an earlier version of the tool took. An exception it raises
            fails the call like a schema violation; ``CancelledError`` passes
            through; an awaitable result is refused. The stored tool call and
            the approval interrupt keep the model's original arguments.
        step_options: The tool Step's own options: ``timeout``, ``retry_policy``
            (``CallTool`` only), ``heartbeat_timeout``, ``ray`` (CPUs, GPUs,
            memory, custom resources, runtime_env, pooled or a Ray task) and
            ``run_inline`` (run a cheap async tool in the session's host
            instead of on Ray). Attempts, effects and crash semantics are
            the same wherever it runs. ``None`` keeps the session's.

    Raises:
        TypeError: A type hint is not supported, or an option has the wrong type.
        ValueError: The name is not 1 to 64 letters, digits, ``_`` or ``-``.
    """

    def wrap(target: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(
            target,
            effect=effect,
            requires_approval=requires_approval,
            name=name,
            description=description,
            parameters_schema=parameters_schema,
            prepare_arguments=prepare_arguments,
            step_options=step_options,
        )

    if function is not None:
        return wrap(function)
    return wrap
