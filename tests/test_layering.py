"""The packages' layering: which package may import which, and only through fronts."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dex_agents_ray"

LAYERS: dict[str, int] = {
    "engine": 0,
    "media": 0,
    "session_graph": 0,
    "session": 1,
    "s3": 1,
    "builtin_loop": 2,
    "mcp": 2,
    "ui_stream": 2,
    "session_listing": 2,
    "litellm": 3,
    "connectors": 3,
    "pydantic_ai": 3,
    "openai_agents": 3,
    "notebook": 3,
    "testing": 3,
    "serve": 4,
    "evals": 4,
    "cli": 5,
    "__init__": 5,
}
"""A package imports only packages of lower layers: the engine imports nothing of
the project, the session nothing of the agent loops, and so on."""

PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("session/_messages.py", "dex_agents_ray.engine._stored"): "stored value sizes",
    ("session/_values.py", "dex_agents_ray.engine._codecs"): "share_decoded_values",
    ("session/_metrics.py", "dex_agents_ray.engine._metrics"): "counters summed before Ray",
    ("testing/_crash.py", "dex_agents_ray.engine._faults"): "the engine's crash-gate hook",
    ("testing/_actors.py", "dex_agents_ray.engine._executor"): "the executor actors' names",
    ("testing/_actors.py", "dex_agents_ray.engine._hosts"): "the scheduler actor's name",
    ("builtin_loop/_model.py", "dex_agents_ray.session._metadata"): "ModelCallMetadata",
    ("builtin_loop/_transcript.py", "dex_agents_ray.session._runner"): "the outcome text",
    ("connectors/_tool.py", "dex_agents_ray.builtin_loop._validation"): "the JSON Schema checks",
    ("connectors/_values.py", "dex_agents_ray.session._values"): "json_ready",
    ("litellm/_client.py", "dex_agents_ray.builtin_loop._estimate"): "token estimates",
    ("ui_stream.py", "dex_agents_ray.session._values"): "json_ready",
}
"""Helpers shared below the fronts, each named here so a new one is a decision."""


def _imports() -> Iterator[tuple[str, str, str]]:
    """(file relative to the package, its package, an imported dex_agents_ray module)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                parts = module.split(".")
                if parts[0] == "dex_agents_ray" and len(parts) > 1 and parts[1] != own:
                    yield rel.as_posix(), own, module


def test_every_package_has_a_layer() -> None:
    names = {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if p.name != "py.typed"}
    names -= {"__pycache__"}
    assert names == set(LAYERS), names ^ set(LAYERS)


def test_packages_import_only_lower_layers() -> None:
    upward = [
        f"{file} imports {module}"
        for file, own, module in _imports()
        if LAYERS[module.split(".")[1]] >= LAYERS[own]
    ]
    assert upward == []


def test_no_package_imports_another_packages_private_module() -> None:
    found = {
        (file, module)
        for file, _, module in _imports()
        if len(module.split(".")) > 2 and module.split(".")[2].startswith("_")
    }
    assert found - set(PRIVATE_IMPORTS_ALLOWED) == set()
    assert set(PRIVATE_IMPORTS_ALLOWED) - found == set(), "a stale allowance"


def test_only_engine_sdk_imports_the_dex_sdks_private_names() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                continue
            parts = node.module.split(".")
            if parts[0] != "dex":
                continue
            private_module = any(part.startswith("_") for part in parts[1:])
            private_names = [a.name for a in node.names if a.name.startswith("_")]
            if (private_module or private_names) and rel != "engine/_sdk.py":
                found.append(f"{rel}: from {node.module} import {', '.join(private_names)}")
    assert found == []
