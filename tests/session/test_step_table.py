"""The session's Steps find each other through one table (``session/_step_table.py``)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from dex import Step

from dex_agents_ray import AgentSessionOptions, ToolEffect
from dex_agents_ray.session._movements import (
    cancel_task_movement,
    question_movement,
    timer_movement,
    tool_movement,
)
from dex_agents_ray.session._step_table import (
    STEP_NAMES,
    registered_steps,
    session_step,
    step,
)
from dex_agents_ray.session._steps_tools import CallTool, CancelToolTask, RecordToolOutcomeUnknown
from dex_agents_ray.session._steps_wait import AwaitQuestionAnswer, AwaitTimer
from dex_agents_ray.session._values import AgentToolCall, AgentToolCallStatus
from tests.session.agents import build_flow


def test_the_table_holds_every_step_of_the_flow_under_its_spec_name() -> None:
    flow = build_flow("/tmp/unused", {}, options=AgentSessionOptions())
    classes = [type(entry.step) for entry in flow.get_steps()]
    assert registered_steps() == {cls.__name__: cls for cls in classes}
    assert sorted(registered_steps()) == sorted(STEP_NAMES)


def test_movements_go_to_the_registered_classes() -> None:
    record = AgentToolCall(
        tool_call_id="c1",
        turn_id="turn-1",
        tool_name="lookup",
        arguments="{}",
        effect=ToolEffect.READ,
        requires_approval=False,
        status=AgentToolCallStatus.APPROVED,
        deferral_order=0,
    )
    flow = build_flow("/tmp/unused", {}, options=AgentSessionOptions())
    assert cast(Any, tool_movement(flow.config, record)).step is CallTool
    assert cast(Any, question_movement("c1")).step is AwaitQuestionAnswer
    assert cast(Any, timer_movement("c1")).step is AwaitTimer
    cancel = cast(Any, cancel_task_movement("c1"))
    assert cancel.step is CancelToolTask
    assert cancel.options._execute_failure_target is RecordToolOutcomeUnknown


def test_a_name_outside_the_spec_or_a_second_class_of_one_name_is_refused() -> None:
    class Unlisted(Step[None]):
        pass

    class RunModel(Step[None]):  # not the session's RunModel
        pass

    with pytest.raises(ValueError, match="Unlisted is not a session Step name"):
        session_step(Unlisted)
    with pytest.raises(ValueError, match="two session Steps are named RunModel"):
        session_step(RunModel)
    assert step("RunModel") is not RunModel
    assert session_step(step("RunModel")) is step("RunModel")  # the same class again
    with pytest.raises(LookupError, match="Unlisted is not registered"):
        step(cast(Any, "Unlisted"))
