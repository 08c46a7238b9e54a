"""What the client knows about providers, as LiteLLM names them.

These checks read only the model string, so they run without importing
LiteLLM (``supports_forced_tool_choice`` runs where an agent is defined).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from dex_agents_ray.builtin_loop import ModelSettings

_TOOL_RESULT_IMAGE_PROVIDERS = frozenset({"anthropic", "bedrock"})
_VERTEX_PROVIDERS = frozenset({"vertex_ai", "vertex_ai_beta"})
_CLAUDE_HOSTS = frozenset({"bedrock", "bedrock_converse"}) | _VERTEX_PROVIDERS
_NO_FORCED_TOOL_CHOICE_MODEL = re.compile(r"(opus|sonnet)-5[-.]5(?![0-9])")

# gen_ai.provider.name values of the OpenTelemetry GenAI semantic conventions.
_OTEL_PROVIDER_NAMES = {
    "openai": "openai",
    "azure": "azure.ai.openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "groq": "groq",
    "deepseek": "deepseek",
    "xai": "x_ai",
    "cohere": "cohere",
    "perplexity": "perplexity",
}


def model_prefix(model: str) -> str | None:
    """The ``provider/`` prefix of a LiteLLM model string, lower-cased, or ``None``."""
    head, separator, _ = model.partition("/")
    return head.lower() if separator else None


def keeps_tool_result_images(provider: str) -> bool:
    """Whether LiteLLM's conversion for ``provider`` keeps images in a tool message."""
    return provider in _TOOL_RESULT_IMAGE_PROVIDERS


def omits_tool_result_images(provider: str, model: str) -> bool:
    """Whether the model is Gemini on the Gemini API or Vertex AI.

    LiteLLM's conversion shows such a model no tool result images at all.
    """
    return provider == "gemini" or (provider in _VERTEX_PROVIDERS and "gemini" in model.lower())


def otel_provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for a LiteLLM provider: its well-known name, or its own."""
    return _OTEL_PROVIDER_NAMES.get(provider, provider)


def _routes_to_claude(model: str) -> bool:
    prefix = model_prefix(model)
    name = model.lower()
    if prefix is None:
        return name.startswith("claude")
    return prefix == "anthropic" or (prefix in _CLAUDE_HOSTS and "claude" in name)


def _enables_thinking(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, Mapping):
        return value.get("type") != "disabled"
    return True


def supports_forced_tool_choice(
    model: str, settings: ModelSettings, request_options: Mapping[str, object]
) -> bool:
    """Whether a call of ``model`` with ``settings`` accepts a forced tool choice.

    Claude Opus 5.5 and Claude Sonnet 5.5 refuse it, and so does Anthropic
    extended thinking: for a model LiteLLM routes to Anthropic, or to Claude
    on Bedrock or Vertex AI, a ``thinking`` option that is not disabled, or a
    ``reasoning_effort`` other than ``"none"``, counts as extended thinking.
    """
    if _NO_FORCED_TOOL_CHOICE_MODEL.search(model.lower()):
        return False
    if not _routes_to_claude(model):
        return True
    sources: list[Mapping[str, object]] = [settings.extra_args, request_options]
    thinking: object = settings.thinking
    effort: object = settings.reasoning_effort
    for source in sources:
        thinking = thinking if thinking is not None else source.get("thinking")
        effort = effort if effort is not None else source.get("reasoning_effort")
    if _enables_thinking(thinking):
        return False
    return effort is None or effort == "none"
