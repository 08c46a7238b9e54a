"""``LiteLLMModelClient``: a ``ModelClient`` on LiteLLM."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dex_agents_ray.builtin_loop import (
    ESTIMATED_IMAGE_INPUT_TOKENS,
    ModelOutputWriter,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ModelSettings,
    estimate_request_tokens,
    request_text,
)
from dex_agents_ray.litellm._chat import read_chat_stream
from dex_agents_ray.litellm._convert import (
    LiteLLMRoute,
    build_chat_messages,
    build_responses_input,
    chat_tools,
    count_sent_images,
    responses_tools,
)
from dex_agents_ray.litellm._loader import load_litellm, load_litellm_async
from dex_agents_ray.litellm._providers import supports_forced_tool_choice
from dex_agents_ray.litellm._responses import read_responses_stream

logger = logging.getLogger("dex_agents_ray.litellm")

ApiKeyProvider = Callable[[], str | Awaitable[str]]
"""Returns the API key for each call, sync or async."""

_CREDENTIAL_OPTIONS = frozenset({"api_key"})
_RESERVED_OPTIONS = frozenset(
    {
        "model",
        "messages",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "stream",
        "stream_options",
        "store",
        "include",
        "previous_response_id",
        "api_base",
        "base_url",
        "custom_llm_provider",
        "max_retries",
        "num_retries",
    }
)


class LiteLLMApi(StrEnum):
    """The API a :class:`LiteLLMModelClient` calls."""

    RESPONSES = "responses"
    """The OpenAI Responses API: the default for OpenAI models."""
    CHAT_COMPLETIONS = "chat_completions"
    """Streaming Chat Completions: the default for every other provider."""


def _redacted_url(url: str) -> str:
    """``url`` without user info or query, which may carry credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _check_options(options: Mapping[str, object], owner: str) -> None:
    for key in options:
        if key in _CREDENTIAL_OPTIONS:
            raise ValueError(
                f"{owner} may not hold {key!r}: credentials come from the process "
                "environment or api_key_provider"
            )
        if key in _RESERVED_OPTIONS:
            raise ValueError(f"{owner} may not set {key!r}: the client sets it")


class LiteLLMModelClient:
    """A :class:`~dex_agents_ray.builtin_loop.ModelClient` on LiteLLM.

    OpenAI models use the Responses API with ``store=False`` and
    ``include=["reasoning.encrypted_content"]`` (left out for models that
    LiteLLM's model map knows as not reasoning, such as ``gpt-4o``, which
    refuse it); every other provider uses
    streaming Chat Completions, keeping Anthropic ``thinking_blocks`` with
    their ``signature``. Each call is one request with no retries of its own,
    sends the whole input, and keeps no provider-side state. Text and
    reasoning stream to the output writer as they arrive.

    Credentials come from the process environment, as LiteLLM reads them
    (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...), or from
    ``api_key_provider``, called for each request; the client never stores a
    key and never shows one in its ``repr`` or logs.

    LiteLLM is imported on the first call or token estimate, not when the
    client is built, so defining an agent stays cheap.

    Example::

        model = LiteLLMModelClient("openai/gpt-5-mini")
        local = LiteLLMModelClient(
            "openai/qwen3", api="chat_completions", api_base="http://127.0.0.1:8000/v1"
        )

    Args:
        model: A LiteLLM model string, such as ``"openai/gpt-5-mini"`` or
            ``"anthropic/claude-sonnet-4-5"``.
        api: ``"responses"`` or ``"chat_completions"``; ``None`` picks the
            Responses API for OpenAI models and Chat Completions otherwise.
        api_base: The provider's base URL; ``None`` for LiteLLM's default.
        api_key_provider: Returns the API key for each call, sync or async;
            ``None`` leaves it to LiteLLM and the environment.
        request_options: Further LiteLLM arguments for every call, such as
            ``{"timeout": 120}``; never a credential.
    """

    def __init__(
        self,
        model: str,
        api: LiteLLMApi | str | None = None,
        api_base: str | None = None,
        api_key_provider: ApiKeyProvider | None = None,
        request_options: Mapping[str, object] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("LiteLLMModelClient model must be a non-empty str")
        chosen_api: LiteLLMApi | None = None
        if api is not None:
            try:
                chosen_api = LiteLLMApi(api)
            except ValueError:
                raise ValueError(
                    f"LiteLLMModelClient api must be 'responses', 'chat_completions' or None, "
                    f"not {api!r}"
                ) from None
        if api_base is not None and (not isinstance(api_base, str) or not api_base):
            raise ValueError("LiteLLMModelClient api_base must be a non-empty str or None")
        if api_key_provider is not None and not callable(api_key_provider):
            raise TypeError("LiteLLMModelClient api_key_provider must be callable")
        options = dict(request_options or {})
        _check_options(options, "LiteLLMModelClient request_options")
        self._model = model
        self._api = chosen_api
        self._api_base = api_base
        self._api_key_provider = api_key_provider
        self._request_options = options
        self._route: LiteLLMRoute | None = None

    @property
    def model(self) -> str:
        """The LiteLLM model string."""
        return self._model

    @property
    def api(self) -> LiteLLMApi | None:
        """The API chosen at construction; ``None`` picks it from the provider."""
        return self._api

    @property
    def api_base(self) -> str | None:
        """The provider's base URL, or ``None`` for LiteLLM's default."""
        return self._api_base

    def __repr__(self) -> str:
        fields = [f"{self._model!r}"]
        if self._api is not None:
            fields.append(f"api={self._api.value!r}")
        if self._api_base is not None:
            fields.append(f"api_base={_redacted_url(self._api_base)!r}")
        return f"LiteLLMModelClient({', '.join(fields)})"

    def route(self) -> LiteLLMRoute:
        """The provider and API this client calls; imports LiteLLM on first use."""
        if self._route is None:
            litellm = load_litellm()
            provider_model, provider, _, _ = litellm.get_llm_provider(
                model=self._model, api_base=self._api_base
            )
            api = self._api or (
                LiteLLMApi.RESPONSES if provider == "openai" else LiteLLMApi.CHAT_COMPLETIONS
            )
            self._route = LiteLLMRoute(
                model=self._model,
                provider=str(provider),
                provider_model=str(provider_model),
                api=api.value,
                encrypted_reasoning=_may_reason(litellm, self._model),
            )
        return self._route

    async def call_model(self, request: ModelRequest, output: ModelOutputWriter) -> ModelResponse:
        """Make one streaming call and return its provider-exact output.

        Raises:
            ValueError: An image's bytes are missing from ``request.image_bytes``,
                or ``request.settings.extra_args`` sets an argument the client owns.
            ModelResponseError: The stream broke off or the response failed.
            Exception: LiteLLM's own errors, such as ``litellm.InternalServerError``
                for an HTTP 500, unchanged.
        """
        litellm = await load_litellm_async()
        route = self.route()
        _check_options(request.settings.extra_args, "ModelSettings.extra_args")
        if route.api == LiteLLMApi.RESPONSES:
            arguments = self._responses_arguments(request, route)
            call = litellm.aresponses
        else:
            arguments = self._chat_arguments(request, route)
            call = litellm.acompletion
        arguments.update(request.settings.extra_args)
        arguments.update(self._request_options)
        await self._add_credentials(arguments)
        logger.debug("calling %s through the %s API", route.model, route.api)
        stream = await call(**arguments)
        if not hasattr(stream, "__aiter__"):
            raise ModelResponseError(
                f"LiteLLM returned {type(stream).__name__} for a streaming call",
                provider=route.provider,
                api=route.api,
            )
        try:
            if route.api == LiteLLMApi.RESPONSES:
                return await read_responses_stream(stream, route, output)
            return await read_chat_stream(stream, route, output)
        finally:
            await _close(stream)

    def estimate_input_tokens(self, request: ModelRequest) -> int:
        """Estimate input tokens with LiteLLM's token counter.

        Each image the call would send counts ``ESTIMATED_IMAGE_INPUT_TOKENS``;
        a Gemini model's tool result images, which it never sends, count
        nothing. Falls back to three UTF-8 bytes per token when the counter fails.
        """
        route = self.route()
        images = count_sent_images(request, route)
        try:
            text_tokens = int(
                load_litellm().token_counter(model=self._model, text=request_text(request))
            )
        except Exception:  # an estimate must never fail the model call
            logger.debug("LiteLLM's token counter failed; estimating by bytes", exc_info=True)
            return estimate_request_tokens(request, image_count=images)
        return text_tokens + images * ESTIMATED_IMAGE_INPUT_TOKENS

    def supports_forced_tool_choice(self, settings: ModelSettings) -> bool:
        """Whether a call with ``settings`` accepts ``ToolChoice.REQUIRED``.

        ``False`` for Claude Opus 5.5 and Claude Sonnet 5.5, and for a Claude
        model with extended thinking: a ``thinking`` option that is not
        disabled, or a ``reasoning_effort`` other than ``"none"``. Reads only
        the model string, so it never imports LiteLLM.
        """
        return supports_forced_tool_choice(self._model, settings, self._request_options)

    def _common(self, request: ModelRequest) -> dict[str, Any]:
        arguments: dict[str, Any] = {"model": self._model, "stream": True, "max_retries": 0}
        if self._api_base is not None:
            arguments["api_base"] = self._api_base
        settings = request.settings
        for name in ("temperature", "top_p", "parallel_tool_calls"):
            value = getattr(settings, name)
            if value is not None:
                arguments[name] = value
        if request.tools:
            arguments["tool_choice"] = request.tool_choice.value
        return arguments

    def _responses_arguments(self, request: ModelRequest, route: LiteLLMRoute) -> dict[str, Any]:
        arguments = self._common(request)
        arguments.update(input=build_responses_input(request, route), store=False)
        if route.encrypted_reasoning:
            arguments["include"] = ["reasoning.encrypted_content"]
        if request.instructions:
            arguments["instructions"] = request.instructions
        if request.tools:
            arguments["tools"] = responses_tools(request.tools)
        settings = request.settings
        if settings.max_output_tokens is not None:
            arguments["max_output_tokens"] = settings.max_output_tokens
        reasoning: dict[str, Any] = {}
        if settings.reasoning_effort is not None:
            reasoning["effort"] = settings.reasoning_effort
        if settings.reasoning_summary is not None:
            reasoning["summary"] = settings.reasoning_summary
        if reasoning:
            arguments["reasoning"] = reasoning
        if settings.thinking is not None:
            arguments["thinking"] = settings.thinking
        return arguments

    def _chat_arguments(self, request: ModelRequest, route: LiteLLMRoute) -> dict[str, Any]:
        arguments = self._common(request)
        arguments.update(
            messages=build_chat_messages(request, route),
            stream_options={"include_usage": True},
        )
        if request.tools:
            arguments["tools"] = chat_tools(request.tools)
        settings = request.settings
        if settings.max_output_tokens is not None:
            arguments["max_tokens"] = settings.max_output_tokens
        if settings.reasoning_effort is not None:
            arguments["reasoning_effort"] = settings.reasoning_effort
        if settings.thinking is not None:
            arguments["thinking"] = settings.thinking
        return arguments

    async def _add_credentials(self, arguments: dict[str, Any]) -> None:
        if self._api_key_provider is None:
            return
        key = self._api_key_provider()
        if inspect.isawaitable(key):
            key = await key
        if not isinstance(key, str) or not key:
            raise ValueError("LiteLLMModelClient api_key_provider must return a non-empty str")
        arguments["api_key"] = key


def _may_reason(litellm: Any, model: str) -> bool:
    """Whether ``model`` may be a reasoning model: ``False`` only for a model
    LiteLLM's bundled model map knows and does not mark as reasoning."""
    try:
        info = litellm.get_model_info(model=model)
    except Exception:  # not in the model map: it may reason
        return True
    return bool(info.get("supports_reasoning"))


async def _close(stream: AsyncIterator[Any]) -> None:
    close = getattr(stream, "aclose", None)
    if close is None:
        return
    try:
        result = close()
        if inspect.isawaitable(result):
            await result
    except Exception:  # the call's own outcome matters, not the close
        logger.debug("closing a LiteLLM stream failed", exc_info=True)
