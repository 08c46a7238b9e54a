"""Reading cases: the JSONL contract, errors naming the line and field, Ray Data rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dex_agents_ray.evals import CASE_FIELDS, EvalCase, EvalCaseError


def _file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_field_is_read_and_written_back(tmp_path: Path) -> None:
    full = {
        "id": "c1",
        "turns": ["hello", "again"],
        "expected": {"order": "A1"},
        "session_settings": {"model": "openai/gpt-5-mini"},
        "metadata": {"suite": "refunds"},
        "answers": ["A1"],
    }
    path = _file(tmp_path, json.dumps(full), "", json.dumps({"id": 7, "input": "one turn"}))

    first, second = EvalCase.from_jsonl(path)

    assert first.turns == ("hello", "again") and first.input == "hello"
    assert first.expected == {"order": "A1"} and first.answers == ("A1",)
    assert first.session_settings == {"model": "openai/gpt-5-mini"}
    assert first.to_json() == full and set(full) | {"input"} == CASE_FIELDS
    assert second.id == "7" and second.turns == ("one turn",) and second.expected is None


@pytest.mark.parametrize(
    ("line", "field", "detail"),
    [
        ('{"id": "a", "input": "x"', None, "not valid JSON"),
        ('["a"]', None, "a case must be a JSON object"),
        ('{"input": "x"}', "id", "missing"),
        ('{"id": "", "input": "x"}', "id", "missing"),
        ('{"id": "a"}', "input", "exactly one of"),
        ('{"id": "a", "input": "x", "turns": ["y"]}', "input", "exactly one of"),
        ('{"id": "a", "input": "  "}', "input", "non-empty string"),
        ('{"id": "a", "turns": []}', "turns", "non-empty list"),
        ('{"id": "a", "turns": ["x", 3]}', "turns", "item 1"),
        ('{"id": "a", "input": "x", "session_settings": [1]}', "session_settings", "object"),
        ('{"id": "a", "input": "x", "metadata": "m"}', "metadata", "object"),
        ('{"id": "a", "input": "x", "answers": [1]}', "answers", "list of strings"),
        ('{"id": "a", "input": "x", "expcted": "y"}', "expcted", "unknown field"),
    ],
)
def test_a_bad_line_names_its_line_and_field(
    tmp_path: Path, line: str, field: str | None, detail: str
) -> None:
    path = _file(tmp_path, '{"id": "ok", "input": "fine"}', line)

    with pytest.raises(EvalCaseError) as raised:
        EvalCase.from_jsonl(path)

    assert raised.value.line == 2 and raised.value.field == field
    assert str(raised.value).startswith(f"{path}:2")
    assert detail in str(raised.value)


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '{"id": "a", "input": "x"}',
        '{"id": "b", "input": "y"}',
        '{"id": "a", "input": "z"}',
    )

    with pytest.raises(
        EvalCaseError, match=r":3: field 'id': duplicate case id 'a' \(first on line 1\)"
    ):
        EvalCase.from_jsonl(path)


def test_oversized_session_settings_name_the_field(tmp_path: Path) -> None:
    big = json.dumps({"id": "a", "input": "x", "session_settings": {"k": "v" * 20000}})

    with pytest.raises(EvalCaseError, match=":1: field 'session_settings'"):
        EvalCase.from_jsonl(_file(tmp_path, big))


def test_cases_from_a_ray_dataset(ray_session: None, tmp_path: Path) -> None:
    import ray

    path = _file(
        tmp_path,
        json.dumps({"id": "a", "input": "x", "expected": "y", "metadata": {"n": 1}}),
        json.dumps({"id": "b", "turns": ["p", "q"]}),
    )

    cases = EvalCase.from_dataset(ray.data.read_json(str(path)))

    by_id = {c.id: c for c in cases}
    assert by_id["a"].turns == ("x",) and by_id["a"].expected == "y"
    assert by_id["a"].metadata == {"n": 1}
    assert by_id["b"].turns == ("p", "q") and by_id["b"].expected is None


def test_records_with_duplicates_name_the_row() -> None:
    with pytest.raises(EvalCaseError, match=r"records:2: field 'id': duplicate"):
        EvalCase.from_records([{"id": "a", "input": "x"}, {"id": "a", "input": "y"}])
