"""Import Inspect AI lazily, in the process that reads or writes its files.

``import inspect_ai`` takes about a second and loads much of its framework, so only
a call that needs it imports it, never an import of this package.
"""

from __future__ import annotations

import importlib
from typing import Any

MISSING_EXTRA_MESSAGE = (
    'dex_agents_ray.evals.inspect needs Inspect AI: pip install "dex-agents-ray[inspect]"'
)


def load_inspect() -> Any:
    """Import and return ``inspect_ai``.

    Raises:
        ImportError: Inspect AI is not installed; the message names the extra.
    """
    try:
        return importlib.import_module("inspect_ai")
    except ImportError as error:
        raise ImportError(MISSING_EXTRA_MESSAGE) from error
