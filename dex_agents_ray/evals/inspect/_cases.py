"""Inspect samples as eval cases.

A sample's ``input`` is one user message (a string) or a message list whose user
messages become the case's turns, in order; its ``target`` (a string, or a list of
acceptable answers) becomes ``expected``; ``id`` and ``metadata`` are carried. What
the session cannot honour is refused with an :class:`EvalCaseError` naming the
field and the sample: a system message (the agent under test brings its own
instructions), assistant or tool messages (a case's turns are the user's), images
or other non-text content, and ``choices``, ``files``, ``sandbox`` and ``setup``
(Inspect's multiple-choice and sandbox machinery, which a session does not run).
A sample without an ID is numbered by its 1-based position, as Inspect does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dex_agents_ray.evals import EvalCase, EvalCaseError
from dex_agents_ray.evals.inspect._loader import load_inspect

if TYPE_CHECKING:
    from inspect_ai.dataset import Dataset, FieldSpec, RecordToSample, Sample

__all__ = ["REFUSED_SAMPLE_FIELDS", "cases_from_inspect", "read_inspect_cases"]

REFUSED_SAMPLE_FIELDS = ("choices", "files", "sandbox", "setup")
"""Sample fields a case cannot carry: a sample that sets one is refused."""

_SYSTEM_REFUSED = (
    "a system message is refused: the agent under test brings its own instructions "
    "(its AgentDefinition); drop the message or build the agent with those instructions"
)


def cases_from_inspect(
    dataset: Dataset | Iterable[Sample], *, source: str | None = None
) -> list[EvalCase]:
    """One case per sample of an Inspect ``Dataset`` (``MemoryDataset``,
    ``json_dataset(...)``, ``csv_dataset(...)``) or any iterable of ``Sample``.

    Args:
        dataset: The samples.
        source: Names the samples in errors (default: the dataset's location or
            name, else ``"inspect"``).

    Raises:
        EvalCaseError: A sample the session cannot run (naming the field and the
            sample's ID and position), or two samples with one ID.
        ImportError: ``inspect-ai`` is not installed.
    """
    load_inspect()
    where = source or _source_of(dataset)
    records = []
    for position, sample in enumerate(dataset, start=1):
        records.append(_record(sample, position, where))
    return EvalCase.from_records(records, source=where)


def read_inspect_cases(
    path: str | os.PathLike[str],
    *,
    sample_fields: FieldSpec | RecordToSample | None = None,
) -> list[EvalCase]:
    """The cases of an Inspect sample file, read by Inspect's own readers:
    ``.csv`` by ``csv_dataset``, ``.json`` (an array) and ``.jsonl`` by
    ``json_dataset``.

    Args:
        path: The file.
        sample_fields: Maps the file's fields to a ``Sample`` (Inspect's
            ``FieldSpec`` or a function); ``None``: the fields are named as a
            ``Sample``'s (``input``, ``target``, ``id``, ``metadata``, ...).

    Raises:
        EvalCaseError: As :func:`cases_from_inspect`, naming the file.
        ValueError: A file that is none of ``.csv``, ``.json`` or ``.jsonl``.
        ImportError: ``inspect-ai`` is not installed.
    """
    location = os.fspath(path)
    suffix = Path(location).suffix.lower()
    if suffix not in (".csv", ".json", ".jsonl"):
        raise ValueError(f"{location}: an Inspect sample file is .csv, .json or .jsonl")
    load_inspect()
    from inspect_ai.dataset import csv_dataset, json_dataset

    reader = csv_dataset if suffix == ".csv" else json_dataset
    return cases_from_inspect(reader(location, sample_fields), source=location)


def _source_of(dataset: object) -> str:
    for name in ("location", "name"):
        value = getattr(dataset, name, None)
        if isinstance(value, str) and value:
            return value
    return "inspect"


def _record(sample: Sample, position: int, source: str) -> dict[str, Any]:
    """The case fields of ``sample`` (``EvalCase.from_records`` checks the rest)."""
    sample_id = str(position) if sample.id is None else str(sample.id)

    def fail(field: str, detail: str) -> EvalCaseError:
        return EvalCaseError(source, position, field, f"sample {sample_id!r}: {detail}")

    for name in REFUSED_SAMPLE_FIELDS:
        if getattr(sample, name, None):
            raise fail(name, f"{name!r} is refused: {_REFUSALS[name]}")
    record: dict[str, Any] = {"id": sample_id}
    if isinstance(sample.input, str):
        if not sample.input.strip():
            raise fail("input", "must be a non-empty string")
        record["input"] = sample.input
    else:
        record["turns"] = _turns(sample.input, fail)
    expected = _expected(sample.target)
    if expected is not None:
        record["expected"] = expected
    if sample.metadata:
        try:
            json.dumps(sample.metadata)
        except (TypeError, ValueError) as error:
            raise fail("metadata", f"must be JSON ({error})") from None
        record["metadata"] = dict(sample.metadata)
    return record


_REFUSALS = {
    "choices": "a session has no multiple-choice answers; put the choices in the input",
    "files": "a session has no sandbox to copy files into",
    "sandbox": "a session runs no sandbox; its tools run where the agent defines them",
    "setup": "a session has no sandbox to run a setup script in",
}


def _turns(messages: list[Any], fail: Callable[[str, str], EvalCaseError]) -> list[str]:
    turns: list[str] = []
    for index, message in enumerate(messages):
        role = getattr(message, "role", None)
        if role == "system":
            raise fail("input", f"message {index}: {_SYSTEM_REFUSED}")
        if role != "user":
            raise fail(
                "input",
                f"message {index} is a {role} message: only user messages become turns "
                "(the session writes the replies)",
            )
        content = message.content
        if not isinstance(content, str):
            other = sorted({part.type for part in content if part.type != "text"})
            if other:
                raise fail("input", f"message {index} holds {', '.join(other)}: a turn is text")
        if not message.text.strip():
            raise fail("input", f"message {index} has no text")
        turns.append(message.text)
    if not turns:
        raise fail("input", "an empty message list: a case needs a user message")
    return turns


def _expected(target: str | list[str]) -> str | list[str] | None:
    """Inspect's target: ``""`` or ``[]`` is none; a list is its acceptable answers."""
    if isinstance(target, str):
        return target or None
    answers = [str(item) for item in target]
    return answers or None
