"""Eval cases: one JSON object per line (``EvalCase.from_jsonl``) or one row per case
(``EvalCase.from_dataset``, ``EvalCase.from_records``; ``EvalCase.iter_dataset``
streams a Ray Dataset too large for the driver's memory).

A case is ``id``, ``input`` (one user message) or ``turns`` (a list of user
messages, one turn each), and optionally ``expected`` (what the scorers compare
with), ``session_settings`` (a JSON object, for example ``{"model": ...}``),
``metadata`` (a JSON object carried into the results) and ``answers`` (scripted
answers to the session's questions, in the order the questions come).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.session import validate_session_settings

__all__ = ["CASE_FIELDS", "EvalCase", "EvalCaseError"]

CASE_FIELDS = frozenset(
    {"id", "input", "turns", "expected", "session_settings", "metadata", "answers"}
)
"""The fields a case may have; any other is refused (it is most likely a typo)."""


class EvalCaseError(DexAgentsError, ValueError):
    """A case that cannot be read: names the source, the line (or row) and the field.

    Attributes:
        source: The file (or ``"records"``, ``"dataset"``) the case came from.
        line: The 1-based line number (row number for records and datasets).
        field: The field at fault; ``None`` when the whole line is.
    """

    def __init__(self, source: str, line: int, field: str | None, detail: str) -> None:
        where = f"{source}:{line}" + (f": field {field!r}" if field else "")
        super().__init__(f"{where}: {detail}")
        self.source = source
        self.line = line
        self.field = field


@dataclass(frozen=True, kw_only=True)
class EvalCase:
    """One case of an evaluation: the user messages of a session and what to expect."""

    id: str
    """Unique within a run; with the run ID it names the case's session."""
    turns: tuple[str, ...]
    """The user messages, one turn each, in order (``input`` is a one-turn case)."""
    expected: Any = None
    """What the scorers compare the answer with (a string or any JSON value);
    ``None``: nothing (scorers that need it fail the case's score)."""
    session_settings: Mapping[str, Any] = field(default_factory=dict)
    """The session's settings (``start_session(session_settings=...)``); empty for none."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Carried into the case's result unchanged; empty for none."""
    answers: tuple[str, ...] = ()
    """Answers to the session's questions (``ask_user``), in the order they are
    asked; a question past the end is left to the interrupt policy."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"EvalCase.id must be a non-empty string, got {self.id!r}")
        turns = tuple(self.turns)
        if not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise ValueError(f"EvalCase {self.id!r}: turns must be non-empty strings")
        object.__setattr__(self, "turns", turns)
        object.__setattr__(self, "answers", tuple(self.answers))
        object.__setattr__(self, "session_settings", dict(self.session_settings))
        object.__setattr__(self, "metadata", dict(self.metadata))
        validate_session_settings(self.session_settings)

    @property
    def input(self) -> str:
        """The first user message."""
        return self.turns[0]

    def to_json(self) -> dict[str, Any]:
        """The case as a JSON object (``from_jsonl`` reads it back)."""
        data: dict[str, Any] = {"id": self.id}
        if len(self.turns) == 1:
            data["input"] = self.turns[0]
        else:
            data["turns"] = list(self.turns)
        if self.expected is not None:
            data["expected"] = self.expected
        if self.session_settings:
            data["session_settings"] = dict(self.session_settings)
        if self.metadata:
            data["metadata"] = dict(self.metadata)
        if self.answers:
            data["answers"] = list(self.answers)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "case", line: int = 1) -> EvalCase:
        """One case from a JSON object; bad input raises ``EvalCaseError``."""
        return _parse(data, source, line)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> list[EvalCase]:
        """Every case in a JSONL file (one object per line; blank lines are skipped).

        Raises:
            EvalCaseError: A line that is not a JSON object, a missing or bad
                field, or a duplicate ``id`` (naming the line and field).
            OSError: The file cannot be read.
        """
        source = os.fspath(path)
        cases: list[tuple[int, EvalCase]] = []
        with Path(path).open(encoding="utf-8") as file:
            for number, text in enumerate(file, start=1):
                if not text.strip():
                    continue
                try:
                    data = json.loads(text)
                except json.JSONDecodeError as error:
                    raise EvalCaseError(
                        source,
                        number,
                        None,
                        f"not valid JSON ({error.msg} at column {error.colno})",
                    ) from None
                cases.append((number, _parse(data, source, number)))
        return _unique(source, cases)

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], *, source: str = "records"
    ) -> list[EvalCase]:
        """Cases from JSON-like mappings (row numbers from 1 in errors)."""
        cases = [(n, _parse(r, source, n)) for n, r in enumerate(records, start=1)]
        return _unique(source, cases)

    @classmethod
    def from_dataset(cls, dataset: Any) -> list[EvalCase]:
        """Cases from a Ray Data ``Dataset`` (for example ``ray.data.read_json(...)``),
        one row per case with the JSONL fields as columns, as a list: every row is
        read into the driver (``iter_dataset`` streams them instead). A missing
        optional field may be a null column.

        Raises:
            EvalCaseError: A bad row or a duplicate ``id`` (``dataset:<row>``, rows
                numbered from 1 in the dataset's order).
        """
        return _unique("dataset", list(_dataset_cases(dataset)))

    @classmethod
    def iter_dataset(cls, dataset: Any) -> Iterator[EvalCase]:
        """The cases of a Ray Data ``Dataset``, read as they are asked for: hand the
        iterator to ``run_eval``, which reads a bounded number of cases ahead of the
        ones it runs, so a dataset larger than the driver's memory can be evaluated.

        Each row is checked as it is read: a bad row raises ``EvalCaseError``
        naming ``dataset:<row>`` (from 1, in the dataset's order) when the
        iterator reaches it. Duplicate IDs are ``run_eval``'s to find (it names
        the row too); this iterator keeps nothing of the rows it has given.
        """
        for _, case in _dataset_cases(dataset):
            yield case


def _dataset_cases(dataset: Any) -> Iterator[tuple[int, EvalCase]]:
    """The dataset's rows as (row number, case), read lazily (``iter_rows`` streams
    the dataset's blocks through the driver)."""
    for number, row in enumerate(dataset.iter_rows(), start=1):
        data = {k: _plain(v) for k, v in row.items()}
        yield number, _parse({k: v for k, v in data.items() if v is not None}, "dataset", number)


def _plain(value: Any) -> Any:
    """A Ray Data / Arrow / NumPy value as plain JSON-like Python."""
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        value = value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN: a missing value
        return None
    return value


def _unique(source: str, cases: Sequence[tuple[int, EvalCase]]) -> list[EvalCase]:
    seen: dict[str, int] = {}
    for number, case in cases:
        if case.id in seen:
            raise EvalCaseError(
                source,
                number,
                "id",
                f"duplicate case id {case.id!r} (first on line {seen[case.id]})",
            )
        seen[case.id] = number
    return [case for _, case in cases]


def _parse(data: Any, source: str, line: int) -> EvalCase:  # noqa: C901 - one check per field
    def fail(name: str | None, detail: str) -> EvalCaseError:
        return EvalCaseError(source, line, name, detail)

    if not isinstance(data, Mapping):
        raise fail(None, f"a case must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - CASE_FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field (a case has {', '.join(sorted(CASE_FIELDS))})")
    case_id = data.get("id")
    if isinstance(case_id, int) and not isinstance(case_id, bool):
        case_id = str(case_id)
    if not isinstance(case_id, str) or not case_id.strip():
        raise fail("id", "missing: every case needs a non-empty string id")
    has_input, has_turns = data.get("input") is not None, data.get("turns") is not None
    if has_input == has_turns:
        raise fail("input", "give exactly one of 'input' (a string) or 'turns' (a list)")
    if has_input:
        text = data["input"]
        if not isinstance(text, str) or not text.strip():
            raise fail("input", "must be a non-empty string")
        turns: tuple[str, ...] = (text,)
    else:
        raw = data["turns"]
        if not isinstance(raw, list) or not raw:
            raise fail("turns", "must be a non-empty list of user messages")
        for index, text in enumerate(raw):
            if not isinstance(text, str) or not text.strip():
                raise fail("turns", f"item {index} must be a non-empty string")
        turns = tuple(raw)
    settings = data.get("session_settings") or {}
    if not isinstance(settings, Mapping):
        raise fail("session_settings", "must be a JSON object")
    try:
        validate_session_settings(settings)
    except (TypeError, ValueError) as error:
        raise fail("session_settings", str(error)) from None
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise fail("metadata", "must be a JSON object")
    answers = data.get("answers") or []
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise fail("answers", "must be a list of strings")
    return EvalCase(
        id=case_id,
        turns=turns,
        expected=data.get("expected"),
        session_settings=dict(settings),
        metadata=dict(metadata),
        answers=tuple(answers),
    )
