"""``LiteLLMModelClient``: the built-in loop's model client on LiteLLM.

Install the extra with ``pip install "dex-agents-ray[litellm]"``. Importing
this package is cheap: LiteLLM itself loads on the first model call or token
estimate, in the process that makes it.
"""

import importlib.util

from dex_agents_ray.litellm._loader import MISSING_EXTRA_MESSAGE

if importlib.util.find_spec("litellm") is None:
    try:
        import litellm  # noqa: F401 - fails fast: the spec lookup found nothing
    except ImportError as _error:
        raise ImportError(MISSING_EXTRA_MESSAGE) from _error

from dex_agents_ray.builtin_loop import ESTIMATED_IMAGE_INPUT_TOKENS  # noqa: E402
from dex_agents_ray.litellm._client import (  # noqa: E402
    ApiKeyProvider,
    LiteLLMApi,
    LiteLLMModelClient,
)
from dex_agents_ray.litellm._convert import (  # noqa: E402
    TOOL_RESULT_IMAGES_OMITTED_TEXT,
    TOOL_RESULT_IMAGES_TEXT,
    LiteLLMRoute,
)

__all__ = [
    "ESTIMATED_IMAGE_INPUT_TOKENS",
    "TOOL_RESULT_IMAGES_OMITTED_TEXT",
    "TOOL_RESULT_IMAGES_TEXT",
    "ApiKeyProvider",
    "LiteLLMApi",
    "LiteLLMModelClient",
    "LiteLLMRoute",
]
