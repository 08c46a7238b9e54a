"""A small JSON Schema checker for tool arguments.

It checks the keywords tool schemas use: ``type``, ``enum``, ``const``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``anyOf``,
``oneOf``, ``allOf``, ``$ref`` into ``$defs`` or ``definitions``, ``minimum``,
``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``minLength``,
``maxLength``, ``pattern``, ``minItems`` and ``maxItems``. Other keywords
(``description``, ``title``, ``default``, ``format``, ...) are annotations and
are not checked. ``enum`` and ``const`` compare with Python's ``==``, so
``true`` matches ``1``, as every Dex core does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from dex_agents_ray.errors import DexAgentsError

__all__ = ["SchemaViolation", "json_type_name", "validate_json_value"]


class SchemaViolation(DexAgentsError, ValueError):
    """A value breaks a schema; the message names the path and the rule."""


def json_type_name(value: object) -> str:
    """The JSON type of a decoded JSON value, as JSON Schema names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _has_type(value: object, kind: str) -> bool:
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return json_type_name(value) == kind


def _show(value: object) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_json_value(value: Any, schema: Mapping[str, Any], path: str = "arguments") -> None:
    """Check a decoded JSON value against ``schema``.

    Raises:
        SchemaViolation: The first rule the value breaks, as ``"<path>: <reason>"``.
    """
    _Checker(schema).check(value, schema, path)


class _Checker:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self._root = root

    def check(self, value: Any, schema: Any, path: str) -> None:
        if schema is True or schema == {}:
            return
        if schema is False:
            raise SchemaViolation(f"{path}: no value is allowed here")
        if not isinstance(schema, Mapping):
            return
        if "$ref" in schema:
            self.check(value, self._resolve(schema["$ref"], path), path)
        self._check_type(value, schema, path)
        self._check_constants(value, schema, path)
        self._check_combinators(value, schema, path)
        if isinstance(value, dict):
            self._check_object(value, schema, path)
        elif isinstance(value, list):
            self._check_array(value, schema, path)
        elif isinstance(value, str):
            self._check_string(value, schema, path)
        elif _has_type(value, "number"):
            self._check_number(value, schema, path)

    def _resolve(self, reference: object, path: str) -> Any:
        if not isinstance(reference, str) or not reference.startswith("#/"):
            raise SchemaViolation(f"{path}: unsupported $ref {reference!r}")
        target: Any = self._root
        for part in reference[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise SchemaViolation(f"{path}: $ref {reference} does not resolve")
            target = target[part]
        return target

    def _check_type(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        kinds = schema.get("type")
        if kinds is None:
            return
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_has_type(value, kind) for kind in allowed):
            expected = " or ".join(allowed)
            raise SchemaViolation(f"{path}: expected {expected}, got {json_type_name(value)}")

    def _check_constants(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        if "enum" in schema and not any(value == option for option in schema["enum"]):
            raise SchemaViolation(f"{path}: {_show(value)} is not one of {_show(schema['enum'])}")
        if "const" in schema and value != schema["const"]:
            raise SchemaViolation(f"{path}: expected {_show(schema['const'])}")

    def _check_combinators(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        for option in schema.get("allOf", ()):
            self.check(value, option, path)
        if "anyOf" in schema and not self._count_matches(value, schema["anyOf"], path, stop=1):
            raise SchemaViolation(f"{path}: {_show(value)} matches none of the allowed schemas")
        if "oneOf" in schema:
            matches = self._count_matches(value, schema["oneOf"], path, stop=2)
            if matches != 1:
                raise SchemaViolation(
                    f"{path}: {_show(value)} must match exactly one schema, matches {matches}"
                )

    def _count_matches(self, value: Any, options: Any, path: str, stop: int) -> int:
        matches = 0
        for option in options:
            try:
                self.check(value, option, path)
            except SchemaViolation:
                continue
            matches += 1
            if matches >= stop:
                break
        return matches

    def _check_object(self, value: dict[str, Any], schema: Mapping[str, Any], path: str) -> None:
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                raise SchemaViolation(f"{path}: missing required property {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            where = f"{path}.{name}"
            if name in properties:
                self.check(item, properties[name], where)
            elif extra is False:
                raise SchemaViolation(f"{path}: unexpected property {name!r}")
            else:
                self.check(item, extra, where)

    def _check_array(self, value: list[Any], schema: Mapping[str, Any], path: str) -> None:
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise SchemaViolation(f"{path}: expected at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaViolation(f"{path}: expected at most {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, Mapping | bool):
            for index, item in enumerate(value):
                self.check(item, items, f"{path}[{index}]")

    def _check_string(self, value: str, schema: Mapping[str, Any], path: str) -> None:
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise SchemaViolation(f"{path}: expected at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise SchemaViolation(f"{path}: expected at most {schema['maxLength']} characters")
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, value) is None:
            raise SchemaViolation(f"{path}: {_show(value)} does not match {pattern!r}")

    def _check_number(self, value: float, schema: Mapping[str, Any], path: str) -> None:
        for keyword, words in _BOUNDS:
            limit = schema.get(keyword)
            if not isinstance(limit, int | float) or isinstance(limit, bool):
                continue
            holds = {
                "minimum": value >= limit,
                "maximum": value <= limit,
                "exclusiveMinimum": value > limit,
                "exclusiveMaximum": value < limit,
            }[keyword]
            if not holds:
                raise SchemaViolation(f"{path}: expected {words} {limit}, got {_show(value)}")


_BOUNDS = (
    ("minimum", "at least"),
    ("maximum", "at most"),
    ("exclusiveMinimum", "more than"),
    ("exclusiveMaximum", "less than"),
)
