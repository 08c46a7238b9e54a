"""Import LiteLLM lazily, once, in the process that calls models.

``import litellm`` takes seconds and about 200 MiB, so only a model call or a
token estimate loads it, never an import of this package or the construction
of a client.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
from typing import Any

MISSING_EXTRA_MESSAGE = (
    'dex_agents_ray.litellm needs LiteLLM: pip install "dex-agents-ray[litellm]"'
)

_LOCAL_COST_MAP_VARIABLE = "LITELLM_LOCAL_MODEL_COST_MAP"


@functools.cache
def load_litellm() -> Any:
    """Import and return the ``litellm`` module.

    Sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` unless the environment already
    sets it, so the import reads LiteLLM's bundled model cost map instead of
    fetching it over the network, and silences LiteLLM's "Provider List"
    notices on stdout.

    Raises:
        ImportError: LiteLLM is not installed; the message names the extra.
    """
    os.environ.setdefault(_LOCAL_COST_MAP_VARIABLE, "True")
    try:
        module: Any = importlib.import_module("litellm")
    except ImportError as error:
        raise ImportError(MISSING_EXTRA_MESSAGE) from error
    module.suppress_debug_info = True
    return module


async def load_litellm_async() -> Any:
    """:func:`load_litellm` without blocking the event loop on the first import."""
    if load_litellm.cache_info().currsize:
        return load_litellm()
    return await asyncio.to_thread(load_litellm)
