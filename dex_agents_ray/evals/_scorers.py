"""Scorers: what a case's answer is worth.

A scorer is an object with a ``name`` and ``async score(sample, context) ->
Score`` (``Scorer``), or a plain callable ``f(sample)`` (sync or async)
returning a ``Score``, a ``bool`` (passed: 1.0, else 0.0) or a number from 0 to 1
(passed at 1.0). Built in: ``exact_match``, ``contains``, ``regex``,
``json_field`` and ``llm_judge`` (a grader agent run as a durable session of
its own, through the same model limits as the cases).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dex_agents_ray.evals._cases import EvalCase
from dex_agents_ray.session import AgentMessage, AgentSessionFlow, AgentUsage

if TYPE_CHECKING:
    from dex_agents_ray.evals._runner import ScoringContext

__all__ = [
    "EvalSample",
    "Score",
    "Scorer",
    "as_scorer",
    "contains",
    "exact_match",
    "json_field",
    "llm_judge",
    "regex",
]


@dataclass(frozen=True, kw_only=True)
class Score:
    """One scorer's verdict on one case."""

    value: float
    """From 0 (wrong) to 1 (right)."""
    passed: bool
    """Whether the case passes this scorer."""
    reason: str | None = None
    """Why; ``None``: the scorer gave none."""

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise TypeError(f"Score.value must be a number, got {self.value!r}")
        if not 0 <= self.value <= 1:
            raise ValueError(f"Score.value must be from 0 to 1, got {self.value!r}")
        object.__setattr__(self, "value", float(self.value))

    @classmethod
    def of(cls, passed: bool, reason: str | None = None) -> Score:
        """1.0 when ``passed``, else 0.0."""
        return cls(value=1.0 if passed else 0.0, passed=passed, reason=reason)


@dataclass(frozen=True, kw_only=True)
class EvalSample:
    """What a scorer sees of one finished case."""

    case: EvalCase
    """The case."""
    session_id: str
    """Its session."""
    answer: str
    """The last assistant text of the last turn; ``""`` when it gave none."""
    messages: tuple[AgentMessage, ...] = ()
    """The session's stored messages (the newest 200 at most), oldest first."""
    usage: AgentUsage = field(default_factory=AgentUsage)
    """The session's usage."""


@runtime_checkable
class Scorer(Protocol):
    """A named scorer. ``flows`` (optional) lists session Flows the scorer runs
    (an LLM judge's); ``run_eval`` registers them with its engine."""

    name: str

    async def score(self, sample: EvalSample, context: ScoringContext) -> Score:
        """The verdict on ``sample``."""
        ...


class _Function:
    """A plain callable as a ``Scorer``."""

    def __init__(self, function: Callable[[EvalSample], Any], name: str) -> None:
        self.function = function
        self.name = name

    async def score(self, sample: EvalSample, context: ScoringContext) -> Score:
        value = self.function(sample)
        if inspect.isawaitable(value):
            value = await value
        return _coerce(value, self.name)


def _coerce(value: Any, name: str) -> Score:
    if isinstance(value, Score):
        return value
    if isinstance(value, bool):
        return Score.of(value)
    if isinstance(value, int | float):
        return Score(value=float(value), passed=float(value) >= 1.0)
    raise TypeError(f"scorer {name!r} returned {type(value).__name__}; want Score, bool or 0..1")


def as_scorer(scorer: Scorer | Callable[[EvalSample], Any]) -> Scorer:
    """``scorer`` as a ``Scorer`` (a plain callable is named after its ``__name__``)."""
    if isinstance(scorer, Scorer):
        return scorer
    if callable(scorer):
        return _Function(scorer, getattr(scorer, "__name__", type(scorer).__name__))
    raise TypeError(f"not a scorer: {scorer!r}")


def _expected_text(sample: EvalSample, given: str | None, name: str) -> str | None:
    if given is not None:
        return given
    expected = sample.case.expected
    if expected is None:
        return None
    return expected if isinstance(expected, str) else json.dumps(expected)


def _alternatives(expected: Any) -> list[str] | None:
    """A non-empty list of strings as ``expected``: the acceptable answers (an
    Inspect sample's list ``target``); ``None`` for any other value."""
    if isinstance(expected, list) and expected and all(isinstance(e, str) for e in expected):
        return expected
    return None


class _Text:
    def __init__(
        self, name: str, text: str | None, test: Callable[[str, str], bool], case_sensitive: bool
    ) -> None:
        self.name = name
        self.text = text
        self.test = test
        self.case_sensitive = case_sensitive

    async def score(self, sample: EvalSample, context: ScoringContext) -> Score:
        alternatives = None if self.text is not None else _alternatives(sample.case.expected)
        if alternatives is None:
            expected = _expected_text(sample, self.text, self.name)
            if expected is None:
                return Score.of(False, "the case has no expected value")
            alternatives = [expected]
        answer = sample.answer
        if not self.case_sensitive:
            alternatives, answer = [e.casefold() for e in alternatives], answer.casefold()
        passed = any(self.test(answer, expected) for expected in alternatives)
        if passed:
            return Score.of(True)
        shown = " or ".join(repr(e[:80]) for e in alternatives[:5])
        return Score.of(False, f"{self.name}: {shown} not matched")


def exact_match(
    expected: str | None = None, *, case_sensitive: bool = False, name: str = "exact_match"
) -> Scorer:
    """Passes when the answer (stripped) equals ``expected`` (default: the case's;
    a case's list of strings is its acceptable answers, any of which passes)."""
    return _Text(name, expected, lambda a, e: a.strip() == e.strip(), case_sensitive)


def contains(
    text: str | None = None, *, case_sensitive: bool = False, name: str = "contains"
) -> Scorer:
    """Passes when the answer contains ``text`` (default: the case's ``expected``;
    a case's list of strings is its acceptable answers, any of which passes)."""
    return _Text(name, text, lambda a, e: e in a, case_sensitive)


class _Regex:
    def __init__(self, pattern: str, flags: int, name: str) -> None:
        self.pattern = re.compile(pattern, flags)
        self.name = name

    async def score(self, sample: EvalSample, context: ScoringContext) -> Score:
        passed = self.pattern.search(sample.answer) is not None
        return Score.of(passed, None if passed else f"/{self.pattern.pattern}/ not found")


def regex(pattern: str, *, flags: int = 0, name: str = "regex") -> Scorer:
    """Passes when ``pattern`` is found in the answer (``re.search``)."""
    return _Regex(pattern, flags, name)


_MISSING = object()


class _JsonField:
    def __init__(self, path: Sequence[str], value: Any, name: str) -> None:
        self.path = tuple(path)
        self.value = value
        self.name = name

    async def score(self, sample: EvalSample, context: ScoringContext) -> Score:
        answer = sample.answer
        start, end = answer.find("{"), answer.rfind("}")
        try:
            found: Any = json.loads(answer[start : end + 1]) if 0 <= start < end else None
        except json.JSONDecodeError:
            found = None
        if not isinstance(found, dict):
            return Score.of(False, "the answer holds no JSON object")
        for key in self.path:
            if not isinstance(found, Mapping) or key not in found:
                return Score.of(False, f"no field {'.'.join(self.path)!r}")
            found = found[key]
        want = self.value
        if want is _MISSING:
            want = sample.case.expected
            if isinstance(want, Mapping):
                for key in self.path:
                    want = want.get(key) if isinstance(want, Mapping) else None
        passed = found == want
        return Score.of(passed, None if passed else f"{'.'.join(self.path)} = {found!r}")


def json_field(field_path: str, value: Any = _MISSING, *, name: str | None = None) -> Scorer:
    """Passes when the first JSON object in the answer has ``field_path``
    (dotted, ``"refund.amount"``) equal to ``value`` (default: the same path in
    the case's ``expected`` when it is an object, else ``expected`` itself)."""
    path = field_path.split(".")
    if not all(path):
        raise ValueError(f"json_field: bad field path {field_path!r}")
    return _JsonField(path, value, name or f"json_field:{field_path}")


JudgePrompt = Callable[[EvalSample], str]
JudgeParse = Callable[[str], Score]


def judge_prompt(sample: EvalSample) -> str:
    """The grader's user message (the ``actors.grader`` format)."""
    expected = _expected_text(sample, None, "llm_judge") or ""
    return f"Question: {sample.case.turns[-1]}\nAnswer: {sample.answer}\nExpected: {expected}"


def parse_judge_reply(text: str) -> Score:
    """A grader reply ``{"score": 0..1, "passed": bool, "reason": "..."}`` as a Score."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError(f"judge reply has no JSON object: {text[:200]!r}")
    data = json.loads(text[start : end + 1])
    if not isinstance(data, dict):
        raise ValueError("judge reply must be a JSON object")
    value, passed = data.get("score"), data.get("passed")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"judge reply: score must be a number, got {value!r}")
    if not isinstance(passed, bool):
        passed = float(value) >= 0.5
    reason = data.get("reason")
    return Score(value=float(value), passed=passed, reason=str(reason) if reason else None)


class _Judge:
    def __init__(
        self, flow: AgentSessionFlow, prompt: JudgePrompt, parse: JudgeParse, name: str
    ) -> None:
        if not isinstance(flow, AgentSessionFlow):
            raise TypeError("llm_judge: flow must be an AgentSessionFlow (a grader agent)")
        self.flow = flow
        self.flows = (flow,)
        self.prompt = prompt
        self.parse = parse
        self.name = name

    async def score(self, sample: EvalSample, context: ScoringContext) -> Score:
        # The judge is a session too: its ID derives from the case's, so a rerun
        # after a kill resumes it instead of calling the model again.
        reply = await context.run_judge(
            self.flow, f"{sample.session_id}:{self.name}", self.prompt(sample), sample.case
        )
        return self.parse(reply)


def llm_judge(
    flow: AgentSessionFlow,
    *,
    prompt: JudgePrompt = judge_prompt,
    parse: JudgeParse = parse_judge_reply,
    name: str = "llm_judge",
) -> Scorer:
    """A model grades the answer: ``flow`` is a grader agent (``actors.grader:flow``)
    sent ``prompt(sample)`` as one turn; its last reply is read by ``parse``.

    The grader session runs on the eval's engine with the same model limits
    and spend ceiling as the cases, and its session ID derives from the case's
    (``<case session>:<name>``), so a rerun resumes it rather than asking again.
    The case's session settings apply to the grader too (its model, say).
    """
    return _Judge(flow, prompt, parse, name)


ScorerLike = Scorer | Callable[[EvalSample], Any]
ScoreFunction = Callable[[EvalSample], Score | bool | float | Awaitable[Score | bool | float]]
