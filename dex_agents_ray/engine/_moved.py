"""Module paths from before the engine's and the session's sub-packages, kept for stored pickles.

A store keeps every Flow definition pickled (``FlowStore.definitions.put``),
and a pickle names each class and function it holds by module path: a store
written before the engine's modules moved into ``sdk/``, ``store/``, ``run/``
and ``actors/`` may name ``dex_agents_ray.engine._options``'s neighbours by
their old flat paths (``dex_agents_ray.engine._codecs``, ``..._invoke`` and so
on). :data:`MOVED` maps each old name to the module that holds its code now,
and an import of an old path (the one ``pickle`` makes to find a class) gets
that module itself, loaded on first use, so its classes are the very ones the
engine uses. :data:`SESSION_MOVED` does the same for the session's tracing
modules, which moved into ``dex_agents_ray/session/tracing/`` (a stored session
Flow names ``AgentTracingOptions`` by its old path); the engine only maps the
names and imports nothing of the session until such a pickle asks for one.
New code imports the new paths (``tests/test_layering.py`` refuses the old
ones in the package).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "SESSION_MOVED", "install"]

_PACKAGE = "dex_agents_ray.engine"
_SESSION = "dex_agents_ray.session"

MOVED: dict[str, str] = {
    "_sdk": "sdk._sdk",
    "_invoke": "sdk._invoke",
    "_codecs": "sdk._codecs",
    "_stored": "sdk._stored",
    "_immutable": "sdk._immutable",
    "_handler_threads": "sdk._handler_threads",
    "_store": "store._store",
    "_sqlite": "store._sqlite",
    "_sqlite_files": "store._sqlite_files",
    "_sqlite_streams": "store._sqlite_streams",
    "_postgres": "store._postgres",
    "_postgres_conn": "store._postgres_conn",
    "_postgres_sql": "store._postgres_sql",
    "_run_rows": "store._run_rows",
    "_store_retry": "store._store_retry",
    "_records": "store._records",
    "_driver": "run._driver",
    "_attempts": "run._attempts",
    "_attempt": "run._watch",
    "_state": "run._state",
    "_decisions": "run._decisions",
    "_deferred": "run._deferred",
    "_waits": "run._waits",
    "_effect_free": "run._effect_free",
    "_streams": "run._streams",
    "_retry": "run._retry",
    "_operations": "run._operations",
    "_flow_config": "run._flow_config",
    "_remote": "run._remote",
    "_host": "actors._host",
    "_hosts": "actors._handles",
    "_scheduler": "actors._scheduler",
    "_placement": "actors._placement",
    "_channel": "actors._channel",
    "_pool": "actors._pool",
    "_executor": "actors._executor",
}
"""Old module name (under ``dex_agents_ray.engine``) -> where its code lives now.

``_hosts``' ``HostConfig`` now lives in ``actors._config`` and ``_store``'s
``open_store`` in ``store._open``; both old modules still import the name, so an
old path finds it."""


SESSION_MOVED: dict[str, str] = {
    "_tracing": "tracing._decorators",
    "_tracing_hooks": "tracing._step_hooks",
    "_tracing_options": "tracing._options",
    "_tracing_otel": "tracing._otel",
    "_tracing_relay": "tracing._relay",
    "_metrics": "tracing._metrics",
}
"""Old module name (under ``dex_agents_ray.session``) -> where its code lives now.

``_tracing``'s ``note_model_result`` and ``ModelResultNote`` now live in
``tracing._notes``, and ``_tracing_options``' ``SpanRelayAddress`` in
``tracing._relay_address``; ``tracing._options`` still imports the latter, so a
stored copy of the options that carries one finds it."""

_MAPS: dict[str, dict[str, str]] = {_PACKAGE: MOVED, _SESSION: SESSION_MOVED}


class _MovedLoader(importlib.abc.Loader):
    """Answers an old path with the module that holds its code now."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set the old path's spec on the module; give it its own back.
        module.__spec__ = self._spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` and :data:`SESSION_MOVED` (after every
    other finder found nothing)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        moved = _MAPS.get(package)
        if moved is None or name not in moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(f"{package}.{moved[name]}"))


_FINDER = _MovedFinder()


def install() -> None:
    """Let imports of the old paths find their modules (idempotent)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
