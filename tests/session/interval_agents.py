"""A scripted runner whose tool tasks take their poll intervals from the call, for
tests of ``PollToolTask``'s bounds (whole seconds from 1 to a day).

The Flow is stored by value with the engine and unpickled in Ray workers, which
import this module by name.
"""

from __future__ import annotations

import json

from dex_agents_ray import (
    DeferredToolExecution,
    DeferredToolOutcome,
    ToolExecutionResult,
    ToolTaskPending,
    ToolTaskPoll,
    ToolTaskPollOutcome,
    ToolTaskStarted,
)
from tests.session.agents import ScriptedRunner


class IntervalTaskRunner(ScriptedRunner):
    """A ``ScriptedRunner`` whose ``interval-task`` tools start a task.

    The call's arguments are ``{"start": <first interval>, "pending": [...]}``:
    the task starts with ``start``, each poll (logged to ``poll.log`` as
    ``<tool_call_id>``) returns ``ToolTaskPending`` with the next of ``pending``,
    and the poll after the last of them returns the result.
    """

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        record = call.tool_call
        if self.behaviours.get(record.tool_name) != "interval-task":
            return await super().execute_deferred_tool_call(call)
        start = json.loads(record.arguments)["start"]
        return ToolTaskStarted(task_id=f"job-{record.tool_call_id}", poll_interval_seconds=start)

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        record = poll.tool_call
        log = self.log("poll")
        log.record(record.tool_call_id)
        polls = log.entries().count(record.tool_call_id)
        pending = json.loads(record.arguments)["pending"]
        if polls <= len(pending):
            return ToolTaskPending(poll_interval_seconds=pending[polls - 1])
        return ToolExecutionResult(output=f"{record.task_id} done after {polls} polls")
