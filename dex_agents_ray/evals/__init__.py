"""Batch evaluation of many sessions: cases in, one durable session per case, scores out.

::

    from dex_agents_ray.evals import EvalCase, ModelRateLimit, approve_all, contains, run_eval

    cases = EvalCase.from_jsonl("cases.jsonl")
    report = await run_eval(
        flow, cases, run_id="nightly-2026-12-01", concurrency=200,
        scorers=[contains("refunded")], interrupts=approve_all(),
        model_limits={"openai/gpt-5-mini": ModelRateLimit(requests_per_minute=500)},
        out="evals/nightly-2026-12-01",
    )
    report.table()

Errors::

    EvalCaseError (ValueError)   a case line or row that cannot be read (source, line, field)
    ValueError / TypeError       a bad argument to run_eval, a scorer or a policy
    ImportError                  table() / plot() without the ``evals`` extra

See docs/evals.md.
"""

from dex_agents_ray.evals._cases import CASE_FIELDS, EvalCase, EvalCaseError
from dex_agents_ray.evals._control import EvalControl, RunState
from dex_agents_ray.evals._limits import (
    CUT_FACTOR,
    DEFAULT_MODEL_KEY,
    DEFAULT_RETRY_AFTER,
    EPISODE,
    EVAL_RUN_MODEL_LIMIT,
    GROW_INTERVAL,
    GROW_STEP,
    MIN_FACTOR,
    EvalModelLimiter,
    ModelRateLimit,
    RateLimitedModelClient,
    rate_limit_retry_after,
)
from dex_agents_ray.evals._policies import (
    Answer,
    Approve,
    InterruptDecision,
    InterruptPolicy,
    Reject,
    answer_with,
    approve_all,
    first_of,
    reject_all,
)
from dex_agents_ray.evals._results import (
    RESULTS_FILE,
    RESULTS_SCHEMA_VERSION,
    SUMMARY_FILE,
    CaseRegression,
    CaseResult,
    CaseStatus,
    EvalComparison,
    EvalReport,
    compare_reports,
)
from dex_agents_ray.evals._runner import EvalProgress, ScoringContext, run_eval, session_id_for
from dex_agents_ray.evals._runs import (
    CASES_FILE,
    RUN_FILE,
    RUN_SCHEMA_VERSION,
    EvalRunReader,
    EvalRunRecord,
    EvalRunStatus,
    eval_run_progress,
    eval_run_status,
    find_eval_runs,
    write_run_record,
)
from dex_agents_ray.evals._scorers import (
    EvalSample,
    Score,
    Scorer,
    as_scorer,
    contains,
    exact_match,
    json_field,
    judge_prompt,
    llm_judge,
    parse_judge_reply,
    regex,
)

__all__ = [
    "CASES_FILE",
    "CASE_FIELDS",
    "CUT_FACTOR",
    "DEFAULT_MODEL_KEY",
    "DEFAULT_RETRY_AFTER",
    "EPISODE",
    "EVAL_RUN_MODEL_LIMIT",
    "GROW_INTERVAL",
    "GROW_STEP",
    "MIN_FACTOR",
    "RESULTS_FILE",
    "RESULTS_SCHEMA_VERSION",
    "RUN_FILE",
    "RUN_SCHEMA_VERSION",
    "SUMMARY_FILE",
    "Answer",
    "Approve",
    "CaseRegression",
    "CaseResult",
    "CaseStatus",
    "EvalCase",
    "EvalCaseError",
    "EvalComparison",
    "EvalControl",
    "EvalModelLimiter",
    "EvalProgress",
    "EvalReport",
    "EvalRunReader",
    "EvalRunRecord",
    "EvalRunStatus",
    "EvalSample",
    "InterruptDecision",
    "InterruptPolicy",
    "ModelRateLimit",
    "Reject",
    "RateLimitedModelClient",
    "RunState",
    "Score",
    "Scorer",
    "ScoringContext",
    "answer_with",
    "approve_all",
    "as_scorer",
    "compare_reports",
    "contains",
    "eval_run_progress",
    "eval_run_status",
    "exact_match",
    "find_eval_runs",
    "first_of",
    "json_field",
    "judge_prompt",
    "llm_judge",
    "parse_judge_reply",
    "rate_limit_retry_after",
    "regex",
    "reject_all",
    "run_eval",
    "session_id_for",
    "write_run_record",
]
