"""The ``search_flows`` query language: ``Field = value`` terms joined by AND.

Fields are the system indexes ``FlowType``, ``FlowId``, ``RunId``,
``ExecutionStatus`` and ``ActiveStepTypes`` (a keyword array: ``=`` means
"contains"), and the index keys of indexed Attributes. Values are quoted
strings, integers, decimals, ``true`` or ``false``. Operators: ``=`` and
``!=``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<op>!=|=)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.\-/]*)
      | (?P<number>-?\d+(?:\.\d+)?)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Term:
    field: str
    op: str
    value: Any


def _literal(kind: str, text: str) -> Any:
    if kind == "string":
        body = text[1:-1]
        return re.sub(r"\\(.)", r"\1", body)
    if kind == "number":
        return float(text) if "." in text else int(text)
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"search query: expected a quoted string, number, true or false, got {text!r}")


def parse_query(query: str) -> list[Term]:
    """Parse ``query``; raises ``ValueError`` naming what is wrong."""
    tokens: list[tuple[str, str]] = []
    position = 0
    text = query.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"search query: cannot read {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        position = match.end()
    terms: list[Term] = []
    index = 0
    while index < len(tokens):
        if len(tokens) - index < 3:
            raise ValueError(f"search query: incomplete term at the end of {query!r}")
        (field_kind, field), (op_kind, op), (value_kind, value) = tokens[index : index + 3]
        if field_kind != "word":
            raise ValueError(f"search query: expected a field name, got {field!r}")
        if op_kind != "op":
            raise ValueError(f"search query: expected = or != after {field}, got {op!r}")
        terms.append(Term(field, op, _literal(value_kind, value)))
        index += 3
        if index < len(tokens):
            kind, word = tokens[index]
            if kind != "word" or word.upper() != "AND":
                raise ValueError(
                    f"search query: expected AND, got {word!r} (only AND is supported)"
                )
            index += 1
            if index == len(tokens):
                raise ValueError("search query: AND at the end of the query")
    return terms


def matcher(terms: list[Term]) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over a run's searchable fields."""

    def matches(fields: Mapping[str, Any]) -> bool:
        for term in terms:
            actual = fields.get(term.field)
            if isinstance(actual, list):
                hit = term.value in actual
            else:
                hit = actual == term.value
            if hit != (term.op == "="):
                return False
        return True

    return matches
