"""The session's Steps by name: the one table through which they find each other.

Each Step module registers its Step classes here (:func:`session_step`) as it is
imported; code that moves to a Step of another module (``_movements``,
``_turns``) looks it up by its spec name (``step("CallTool")``) instead of
importing that module, so no Step module imports another and none imports a
module that imports it. ``AgentSessionFlow`` (``_flow``, imported by
``dex_agents_ray.session`` itself) imports every Step module, so the table is
complete before any Step runs, in every process that unpickles a session Flow.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, get_args

from dex import Step

__all__ = ["STEP_NAMES", "StepName", "registered_steps", "session_step", "step"]

StepName = Literal[
    "StartAgentSession",
    "AwaitUserMessage",
    "RunModel",
    "CompactContext",
    "ResumeTurn",
    "ApplyTurnControl",
    "RecordTurnFailure",
    "FinishTurnCancellation",
    "AwaitToolApproval",
    "AwaitQuestionAnswer",
    "AwaitTimer",
    "CallTool",
    "CallSingleAttemptTool",
    "PollToolTask",
    "RecordToolFailure",
    "RecordToolOutcomeUnknown",
    "CancelToolTask",
]
"""The spec's names of the session Steps (each class is named so, and its
history entries are ``<name>-<n>``)."""

STEP_NAMES: tuple[StepName, ...] = get_args(StepName)

_S = TypeVar("_S", bound=type[Step[Any]])
_STEPS: dict[str, type[Step[Any]]] = {}


def session_step(cls: _S) -> _S:
    """Class decorator: enter a session Step in the table under its class name.

    Raises:
        ValueError: the name is not one of :data:`StepName`, or another class
            has it already.
    """
    name = cls.__name__
    if name not in STEP_NAMES:
        raise ValueError(f"{name} is not a session Step name")
    registered = _STEPS.setdefault(name, cls)
    if registered is not cls:
        raise ValueError(f"two session Steps are named {name}")
    return cls


def step(name: StepName) -> type[Step[Any]]:
    """The Step class named ``name``.

    Raises:
        LookupError: its module was not imported (``dex_agents_ray.session``
            imports every one).
    """
    try:
        return _STEPS[name]
    except KeyError:
        raise LookupError(f"the session Step {name} is not registered") from None


def registered_steps() -> dict[str, type[Step[Any]]]:
    """A copy of the table: Step name -> class."""
    return dict(_STEPS)
