"""The compaction rule adapters share, and the policy's checks (no Ray)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from dex_agents_ray import (
    CONTEXT_SUMMARY_TRANSCRIPT_HEADER,
    AgentMessage,
    AgentSessionOptions,
    AgentTurnContext,
    CompactionPolicy,
    ContextSummary,
    ContextSummaryRequest,
    MessageRole,
    build_context_summary_omission_note,
    build_context_summary_prompt,
    estimate_stored_input_tokens,
    estimate_text_tokens,
    select_turn_boundary_cutoff,
)
from tests.session.agents import build_flow


def _message(sequence: int, turn: int, text: str) -> AgentMessage:
    return AgentMessage(
        sequence=sequence,
        turn_id=f"turn-{turn}",
        role=MessageRole.USER if sequence % 2 else MessageRole.ASSISTANT,
        framework_item=text,
        text=text,
    )


def _turn(messages: list[AgentMessage], run_state: str | None = None) -> AgentTurnContext:
    return AgentTurnContext(
        flow_id="s",
        turn_id=messages[-1].turn_id,
        attempt=1,
        messages=tuple(messages),
        framework_run_state=run_state,
        tool_calls={},
        events=None,  # type: ignore[arg-type]
        heartbeat=None,  # type: ignore[arg-type]
    )


def test_tokens_are_three_utf8_bytes_each_rounded_up() -> None:
    assert estimate_text_tokens("") == 0
    assert estimate_text_tokens("abcd") == 2
    assert estimate_text_tokens("é") == 1  # two bytes
    messages = [_message(1, 1, "a" * 30), _message(2, 1, "b" * 30)]
    assert estimate_stored_input_tokens(_turn(messages), fixed_input_tokens=5) == 25


def test_the_turn_boundary_cutoff_keeps_the_running_turn_and_the_budget() -> None:
    messages = [
        _message(1, 1, "a" * 300),
        _message(2, 1, "b" * 300),
        _message(3, 2, "c" * 300),
        _message(4, 2, "d" * 300),
        _message(5, 3, "e" * 30),
    ]
    # 100 tokens a message: keeping turn 3 alone fits 50, so turns 1 and 2 go.
    assert select_turn_boundary_cutoff(_turn(messages), 50) == 4
    # A budget that keeps turn 2 too cuts after turn 1.
    assert select_turn_boundary_cutoff(_turn(messages), 250) == 2
    assert select_turn_boundary_cutoff(_turn(messages, run_state="x"), 50) is None
    assert select_turn_boundary_cutoff(_turn(messages[-1:]), 50) is None  # no earlier turn


def test_the_summary_prompt_leaves_out_the_oldest_that_do_not_fit() -> None:
    messages = tuple(_message(i, 1, f"message {i} " + "x" * 90) for i in range(1, 11))
    request = ContextSummaryRequest(
        flow_id="s",
        turn_id="turn-1",
        attempt=1,
        previous_summary=None,
        messages=messages,
        through_sequence=10,
        input_token_budget=200,
    )
    prompt = build_context_summary_prompt(request)
    assert prompt.startswith(CONTEXT_SUMMARY_TRANSCRIPT_HEADER)
    assert "message 10 " in prompt and "message 1 " not in prompt
    kept = sum(f"message {i} " in prompt for i in range(1, 11))
    assert build_context_summary_omission_note(10 - kept) in prompt
    assert build_context_summary_omission_note(3) == (
        "[Dex] 3 earlier messages did not fit in this request and are left out."
    )
    assert estimate_text_tokens(prompt) <= 200


@pytest.mark.parametrize("budget", [40, 41, 57, 100, 133, 200, 317, 1000, 5000])
@pytest.mark.parametrize("summary_chars", [0, 50, 2000])
def test_the_summary_prompt_holds_its_budget_exactly(budget: int, summary_chars: int) -> None:
    """Header, previous summary, omission note and separators all count: the whole
    prompt's ``estimate_text_tokens`` is at most ``input_token_budget``."""
    sizes = [1, 2, 7, 40, 3, 299, 5, 61, 4, 130, 2, 8]
    messages = tuple(_message(i, 1, f"m{i} " + "é" * n) for i, n in enumerate(sizes, start=1))
    summary = (
        None
        if not summary_chars
        else ContextSummary(
            generation=1,
            first_sequence=1,
            last_sequence=0,
            text="s" * summary_chars,
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    )
    request = ContextSummaryRequest(
        flow_id="s",
        turn_id="turn-1",
        attempt=1,
        previous_summary=summary,
        messages=messages,
        through_sequence=len(messages),
        input_token_budget=budget,
    )
    prompt = build_context_summary_prompt(request)
    assert prompt.startswith(CONTEXT_SUMMARY_TRANSCRIPT_HEADER)
    assert estimate_text_tokens(prompt) <= budget
    kept = [i for i in range(1, len(sizes) + 1) if f"m{i} " in prompt]
    assert kept == list(range(len(sizes) - len(kept) + 1, len(sizes) + 1))  # the newest
    if len(kept) < len(sizes):
        assert build_context_summary_omission_note(len(sizes) - len(kept)) in prompt
    if budget >= 5000:
        assert len(kept) == len(sizes) and (summary is None or summary.text in prompt)


def test_a_summary_budget_below_the_header_and_note_is_refused() -> None:
    request = ContextSummaryRequest(
        flow_id="s",
        turn_id="turn-1",
        attempt=1,
        previous_summary=None,
        messages=(_message(1, 1, "x" * 300),),
        through_sequence=1,
        input_token_budget=20,
    )
    with pytest.raises(ValueError, match="input_token_budget"):
        build_context_summary_prompt(request)


def test_a_policy_is_checked_and_needs_a_compaction_runner(tmp_path: Path) -> None:
    policy = CompactionPolicy(context_window_tokens=1000)
    assert (policy.trigger_tokens, policy.retained_token_budget) == (850, 300)
    with pytest.raises(ValueError, match="context_window_tokens"):
        CompactionPolicy(context_window_tokens=0)
    with pytest.raises(ValueError, match="retained_ratio"):
        CompactionPolicy(context_window_tokens=10, trigger_ratio=0.5, retained_ratio=0.6)
    with pytest.raises(TypeError, match="ContextCompactionRunner"):
        build_flow(tmp_path, {}, options=AgentSessionOptions(compaction=policy))
    with pytest.raises(ValueError, match="retained_message_limit"):
        AgentSessionOptions(retained_message_limit=0)
