"""Callbacks a host or executor runs before its process exits cleanly.

A dedicated host that passivated its run ends its own process with
``ray.kill``, which skips ``atexit``; hosts and executors run these hooks
first (and on ``shutdown``), so an integration such as tracing can flush what
it buffered. A process killed from outside runs none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger("dex_agents_ray.engine")

__all__ = ["on_clean_exit", "run_exit_hooks"]

_hooks: list[Callable[[], None]] = []


def on_clean_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` before this process's host or executor exits cleanly (once per hook)."""
    if hook not in _hooks:
        _hooks.append(hook)


def run_exit_hooks() -> None:
    """Run every hook; one that raises is logged and the rest still run."""
    for hook in list(_hooks):
        try:
            hook()
        except Exception:
            logger.warning("an exit hook failed", exc_info=True)
