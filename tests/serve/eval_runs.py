"""Real eval runs for the eval pages' tests: the scripted eval agent of tests/evals,
run with ``run_eval`` into ``<root>/evals/<run_id>``.

``nightly-1`` has a case of every kind: passed, failed (scored, not passed), one
approved by the policy, a scripted answer, one that needs a person, and one whose
scorer raised (errored). ``nightly-2`` changes the case set and the expectations:
a regression, an improvement, a case added and one removed, and a third case that
waits at the ``lookup`` FileGate while the test looks at the run live.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from dex_agents_ray import AgentSessionFlow
from dex_agents_ray.evals import EvalCase, EvalReport, Score, approve_all, contains, run_eval

SCRIPT_TEXT = "<script>window.__pwned = 1</script><img src=x onerror=window.__pwned=2> look"


def concise(sample: Any) -> Score:
    """Shorter answers score higher; the ``outage`` case's grader is down."""
    if sample.case.id == "outage":
        raise RuntimeError("the grader is down")
    value = min(1.0, 24 / max(1, len(sample.answer)))
    return Score(value=value, passed=True, reason=f"{len(sample.answer)} characters")


def _priced(cases: list[EvalCase]) -> list[EvalCase]:
    """Each case with a ``cost_usd`` in its metadata (the row's cost), by its turns."""
    return [
        dataclasses.replace(c, metadata={"cost_usd": 0.0011 * len(c.turns), "suite": "support"})
        for c in cases
    ]


def nightly_1() -> list[EvalCase]:
    return _priced(
        [
            EvalCase(id="order-status", turns=("where is order 7",), expected="found"),
            EvalCase(id="refund-7", turns=("refund order 7",), expected="refunded"),
            EvalCase(id="two-turns", turns=("look up a", "look up b"), expected="found look up b"),
            EvalCase(id="wrong-answer", turns=(SCRIPT_TEXT,), expected="not found"),
            EvalCase(id="ask-colour", turns=("ask my colour",), answers=("blue",), expected="blue"),
            EvalCase(id="needs-person", turns=("ask about the account",), expected="savings"),
            EvalCase(id="outage", turns=("look up d",), expected="found"),
        ]
    )


def nightly_2() -> list[EvalCase]:
    return _priced(
        [
            EvalCase(id="order-status", turns=("where is order 7",), expected="missing"),
            EvalCase(id="refund-7", turns=("refund order 7",), expected="refunded"),
            EvalCase(id="slow-lookup", turns=("look up GATE",), expected="found"),
            EvalCase(id="wrong-answer", turns=(SCRIPT_TEXT,), expected="found"),
            EvalCase(id="ask-colour", turns=("ask my colour",), answers=("blue",), expected="blue"),
            EvalCase(id="needs-person", turns=("ask about the account",), expected="savings"),
            EvalCase(id="outage", turns=("look up d",), expected="found"),
            EvalCase(id="new-case", turns=("look up e",), expected="found"),
        ]
    )


async def run(
    flow: AgentSessionFlow,
    run_id: str,
    cases: list[EvalCase],
    *,
    evals: Path,
    store: Path,
    namespace: str,
    concurrency: int = 4,
) -> EvalReport:
    return await run_eval(
        flow,
        cases,
        run_id=run_id,
        concurrency=concurrency,
        scorers=[contains(), concise],
        interrupts=approve_all(),
        out=evals / run_id,
        store=store,
        namespace=namespace,
    )
