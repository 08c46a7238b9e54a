"""Effect-free Steps: Steps whose handlers change nothing outside their run.

A Step's completion is normally durable before the Steps it moves to start, so
a host that dies repeats at most the one call that was running. When the Step
that completed is marked :func:`effect_free` (its handlers only read the run,
write its Attributes, messages and streams, and choose the next Steps), redoing
it after a crash changes nothing outside the run, so the engine lets the next
in-host Steps start while its completion is still being written. The run's
next commit waits for that write, and so does every attempt that must start
exactly (a remote dispatch, a Step's last attempt). A host that dies before the
write lands redoes the effect-free Step and the attempt that had started after
it: still at most the one call that was running. That attempt's start is then
not counted (it was recorded in the lost write), which a retryable attempt can
afford and a last attempt never risks.
"""

from __future__ import annotations

from typing import Any, TypeVar

from dex import Step

EFFECT_FREE_ATTRIBUTE = "__dex_agents_ray_effect_free__"

S = TypeVar("S", bound=type[Step[Any]])


def effect_free(step_class: S) -> S:
    """Mark ``step_class`` as effect-free (see the module docstring).

    The mark belongs to the class itself: a subclass that may add effects is
    not effect-free unless it is marked too.

    Raises:
        TypeError: ``step_class`` is not a ``dex.Step`` subclass.
    """
    if not isinstance(step_class, type) or not issubclass(step_class, Step):
        raise TypeError(f"effect_free marks a dex.Step subclass, got {step_class!r}")
    setattr(step_class, EFFECT_FREE_ATTRIBUTE, True)
    return step_class


def is_effect_free(step: object) -> bool:
    """Whether ``step`` (a Step instance) is of a class marked :func:`effect_free`."""
    return type(step).__dict__.get(EFFECT_FREE_ATTRIBUTE) is True
