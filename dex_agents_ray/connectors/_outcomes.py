"""What a selected branch records: the spec's branch table, and result texts."""

from __future__ import annotations

from dex_agents_ray.connectors._manifest import (
    DEFECT_BRANCH,
    UNCERTAIN_BRANCH,
    ConnectorOperationEntry,
    ListedBranch,
)
from dex_agents_ray.session import AgentToolCallStatus

__all__ = [
    "CONNECTOR_NOT_SENT_RETRY_LATER",
    "CONNECTOR_RESULT_TRUNCATED_NOTE",
    "DEFAULT_CONNECTOR_RESULT_MAX_BYTES",
    "branch_message",
    "classify_connector_branch",
    "truncate_result",
]

DEFAULT_CONNECTOR_RESULT_MAX_BYTES = 64 * 1024
"""A result's largest size in UTF-8 bytes before it is cut (64 KiB)."""
CONNECTOR_RESULT_TRUNCATED_NOTE = (
    "\n[Dex] The connector's result was cut here: it was longer than the tool's max_result_bytes."
)
"""What follows a result that was cut."""
CONNECTOR_NOT_SENT_RETRY_LATER = (
    "the connector asked to retry later and its fence proves the request was not sent, "
    "so it is safe to call the tool again later"
)
"""``error`` of a single-attempt write whose connector asked to retry after its fence
saved ``notSent`` or ``canResend`` in the attempt."""


def classify_connector_branch(
    entry: ConnectorOperationEntry, branch: str, *, may_have_sent: bool = False
) -> AgentToolCallStatus:
    """What a call records for ``branch``: the first matching row of the branch table.

    ======================================================  ==================
    Branch                                                  Record
    ======================================================  ==================
    ``uncertain``, whatever the listing says                ``OUTCOME_UNKNOWN``
    a Mutation's ``defect``, whatever the listing says      ``OUTCOME_UNKNOWN``
    a required (success) branch other than ``defect``       ``SUCCEEDED``
    any Mutation branch while ``may_have_sent``             ``OUTCOME_UNKNOWN``
    listed ``rejected`` under ``agent.branches``            ``FAILED``
    listed ``unknown``, or a Mutation branch not listed     ``OUTCOME_UNKNOWN``
    a Query branch not listed, ``defect`` included          ``FAILED``
    ======================================================  ==================

    Args:
        entry: The operation's manifest entry.
        branch: The branch its run selected.
        may_have_sent: Whether the Mutation's fence cannot prove that nothing was
            sent (see ``ConnectorStepContext``); ignored for a Query.
    """
    mutation = entry.is_mutation
    listed = entry.listed_branches.get(branch)
    if branch == UNCERTAIN_BRANCH:
        return AgentToolCallStatus.OUTCOME_UNKNOWN
    if mutation and branch == DEFECT_BRANCH:
        return AgentToolCallStatus.OUTCOME_UNKNOWN
    if branch in entry.required_branches and branch != DEFECT_BRANCH:
        return AgentToolCallStatus.SUCCEEDED
    if mutation and may_have_sent:
        return AgentToolCallStatus.OUTCOME_UNKNOWN
    if listed is ListedBranch.REJECTED:
        return AgentToolCallStatus.FAILED
    if listed is ListedBranch.UNKNOWN or mutation:
        return AgentToolCallStatus.OUTCOME_UNKNOWN
    return AgentToolCallStatus.FAILED


def branch_message(
    entry: ConnectorOperationEntry, branch: str, kind: str | None, message: str | None
) -> str:
    """``"<connector> <operation> returned <branch>: <kind>: <message>"``."""
    return (
        f"{entry.connector_id} {entry.operation_name} returned {branch}: "
        f"{kind or 'unknown'}: {message or 'no message'}"
    )


def truncate_result(text: str, max_bytes: int) -> tuple[str, int | None]:
    """``text`` cut to ``max_bytes`` of UTF-8 (never inside a character) and followed
    by ``CONNECTOR_RESULT_TRUNCATED_NOTE``, with its full size; unchanged with
    ``None`` when it fits."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, None
    kept = data[:max_bytes].decode("utf-8", errors="ignore")
    return kept + CONNECTOR_RESULT_TRUNCATED_NOTE, len(data)
