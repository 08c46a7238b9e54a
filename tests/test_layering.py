"""The packages' layering: which package may import which, and only through fronts."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dex_agents_ray"

LAYERS: dict[str, int] = {
    "errors": -1,
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
    "evals": 3,
    "serve": 4,
    "cli": 5,
    "__init__": 5,
}
"""A package imports only packages of lower layers: the errors' root below every
package, the engine nothing else of the project, the session nothing of the agent
loops, and so on (evals sits below serve, whose inspector shows eval runs)."""

PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("session/_messages.py", "dex_agents_ray.engine.sdk._stored"): "stored value sizes",
    ("session/tracing/_metrics.py", "dex_agents_ray.engine._metrics"): "counters summed before Ray",
    ("testing/_crash.py", "dex_agents_ray.engine._faults"): "the engine's crash-gate hook",
    ("testing/_actors.py", "dex_agents_ray.engine.actors._executor"): "the executor actors' names",
    ("testing/_actors.py", "dex_agents_ray.engine.actors._handles"): "the scheduler actor's name",
}
"""Helpers shared below the fronts, each named here so a new one is a decision:
at most :data:`MAX_PRIVATE_IMPORTS` module pairs (the session's stored sizes and
Ray counters, the testing kit's crash gate and actor names)."""

MAX_PRIVATE_IMPORTS = 5

ENGINE_LAYERS: dict[str, int] = {
    "_errors": 0,
    "_options": 0,
    "_clock": 0,
    "_faults": 0,
    "_exit_hooks": 0,
    "_metrics": 0,
    "sdk": 1,
    "store": 2,
    "run": 3,
    "actors": 4,
    "__init__": 5,
    "_engine": 5,
    "_engine_options": 5,
    "_client": 5,
    "_sync": 5,
    "_polls": 5,
    "_query": 5,
    "_moved": 5,
}
"""The engine's rooms, bottom up: the front's vocabulary (errors, options, the
clock, crash gates, metrics) that every layer uses, then sdk < store < run <
actors < the front (``FlowEngine``, the clients). A module imports only rooms
of its own layer or below; the vocabulary imports only itself."""

_MODULES: dict[str, Path] = {}
for _path in sorted(PACKAGE.rglob("*.py")):
    _parts = _path.relative_to(PACKAGE.parent).with_suffix("").parts
    _MODULES[".".join(_parts[:-1] if _parts[-1] == "__init__" else _parts)] = _path


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _project_imports(path: Path, *, type_checking: bool) -> Iterator[str]:
    """The dex_agents_ray modules ``path`` imports, at module or function level
    (and under ``TYPE_CHECKING`` when ``type_checking``); ``from pkg import
    _module`` counts as an import of ``pkg._module``."""

    def visit(node: ast.AST) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child) and not type_checking:
                for other in child.orelse:  # type: ignore[attr-defined]
                    yield from visit_node(other)
                continue
            yield from visit_node(child)

    def visit_node(node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "dex_agents_ray":
                return
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                package = _MODULES.get(node.module, PACKAGE).name == "__init__.py"
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                yield full if full in _MODULES or (package and private) else node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "dex_agents_ray")
        else:
            yield from visit(node)

    yield from visit(ast.parse(path.read_text()))


def _imports() -> Iterator[tuple[str, str, str]]:
    """(file relative to the package, its package, an imported module of another package)."""
    for path in _MODULES.values():
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0].removesuffix(".py")
        for module in _project_imports(path, type_checking=True):
            parts = module.split(".")
            if len(parts) > 1 and parts[1] != own:
                yield rel.as_posix(), own, module


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[2:])


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
    found = {(file, module) for file, _, module in _imports() if _is_private(module)}
    assert found - set(PRIVATE_IMPORTS_ALLOWED) == set()
    assert set(PRIVATE_IMPORTS_ALLOWED) - found == set(), "a stale allowance"
    assert len(PRIVATE_IMPORTS_ALLOWED) <= MAX_PRIVATE_IMPORTS


def test_every_import_of_the_package_names_a_module_or_a_front() -> None:
    """Old paths (``engine._codecs``) import only for stored pickles (``engine/_moved.py``)."""
    missing = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in _MODULES.values()
        for module in _project_imports(path, type_checking=True)
        if module not in _MODULES
    ]
    assert missing == []


def _engine_room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def test_the_engine_layers_import_only_downward() -> None:
    rooms = {
        path.name.removesuffix(".py")
        for path in (PACKAGE / "engine").iterdir()
        if path.suffix == ".py" or (path / "__init__.py").exists()
    }
    assert rooms == set(ENGINE_LAYERS), rooms ^ set(ENGINE_LAYERS)
    upward = []
    for module, path in _MODULES.items():
        if not module.startswith("dex_agents_ray.engine"):
            continue
        room = _engine_room(module)
        for imported in _project_imports(path, type_checking=True):
            if not imported.startswith("dex_agents_ray.engine"):
                continue
            other = _engine_room(imported)
            layer, other_layer = ENGINE_LAYERS[room], ENGINE_LAYERS[other]
            if other_layer > layer or (layer == 0 and other != room and other_layer != 0):
                upward.append(f"{module} ({room}) imports {imported} ({other})")
    assert upward == []


def _cycles(package: str) -> list[frozenset[str]]:
    """The strongly connected parts (of two or more modules) of ``package``'s
    import graph: module- and function-level imports, ``TYPE_CHECKING`` excluded."""
    graph = {
        module: {
            imported
            for imported in _project_imports(path, type_checking=False)
            if imported in _MODULES and (imported + ".").startswith(package + ".")
        }
        for module, path in _MODULES.items()
        if (module + ".").startswith(package + ".")
    }
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def connect(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in graph[module]:
            if imported not in order:
                connect(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            part = {stack.pop()}
            while module not in part:
                part.add(stack.pop())
            if len(part) > 1:
                found.append(frozenset(part))

    for module in sorted(graph):
        if module not in order:
            connect(module)
    return found


def test_no_import_cycle_inside_a_package() -> None:
    """No package's modules import each other in a circle, the engine's and the
    session's included (the session's Steps find each other through
    ``session/_step_table.py``, its tracing rooms import only downward)."""
    packages = sorted({".".join(module.split(".")[:2]) for module in _MODULES if "." in module})
    found = [sorted(cycle) for package in packages for cycle in _cycles(package)]
    assert found == []


def test_no_session_step_module_imports_another() -> None:
    """A Step module reaches another's Steps by name (``_step_table``), never by import."""
    steps = {m for m in _MODULES if m.startswith("dex_agents_ray.session._steps_")}
    assert len(steps) == 3, steps
    found = [
        f"{module} imports {imported}"
        for module in sorted(steps)
        for imported in _project_imports(_MODULES[module], type_checking=True)
        if imported in steps
    ]
    assert found == []


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
            if (private_module or private_names) and not rel.startswith("engine/sdk/"):
                found.append(f"{rel}: from {node.module} import {', '.join(private_names)}")
    assert found == []
