"""How the ready agents choose their model: scripted unless one is named.

A model is named by the ``DEX_AGENTS_MODEL`` environment variable (any LiteLLM
model name, read where the session's Steps run) or per session by the session
setting ``model`` (``start_session(..., session_settings={"model": "openai/gpt-5-mini"})``).
A named model runs through ``LiteLLMModelClient``, which reads the provider's
key (``OPENAI_API_KEY`` and the like) from the environment of the Ray processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from dex_agents_ray.builtin_loop import (
    ModelClient,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
)

MODEL_ENV = "DEX_AGENTS_MODEL"
"""The environment variable that names a LiteLLM model for every ready agent."""
MODEL_SETTING = "model"
"""The session setting that names a LiteLLM model for one session."""

Script = Callable[[ModelRequest], ScriptedModelReply]


def default_model(script: Script) -> ModelClient:
    """``LiteLLMModelClient($DEX_AGENTS_MODEL)`` when the variable is set, else ``script``."""
    name = os.environ.get(MODEL_ENV, "").strip()
    if name:
        return _litellm(name)
    return ScriptedModelClient(script)


class SettingsModelResolver:
    """``AgentDefinition.resolve_model``: the session setting ``model`` names a
    LiteLLM model; without it, the agent's default model. Clients are built once
    per model name in each process."""

    def __init__(self, default: ModelClient) -> None:
        self.default = default
        self._clients: dict[str, ModelClient] = {}

    def __call__(self, settings: Mapping[str, Any]) -> ModelClient:
        name = settings.get(MODEL_SETTING)
        if name is None or name == "":
            return self.default
        if not isinstance(name, str):
            raise ValueError(f"session setting {MODEL_SETTING!r} must be a model name (a str)")
        client = self._clients.get(name)
        if client is None:
            client = self._clients[name] = _litellm(name)
        return client

    def __getstate__(self) -> dict[str, Any]:
        return {"default": self.default, "_clients": {}}


def _litellm(name: str) -> ModelClient:
    from dex_agents_ray.litellm import LiteLLMModelClient

    return LiteLLMModelClient(name)
