"""How a framework adapter's agent travels to the Ray processes that run its Steps.

``FlowEngine.start`` pickles every Flow (cloudpickle), and a Pydantic AI
``Agent`` does not pickle: it holds context variables, locks and, with a
provider model, an HTTP client with an SSL context. So an agent travels:

- **by reference** when an importable module holds it as a global
  (``module:attr``): the far side imports the module and takes the attribute;
- **by value** otherwise (``__main__``, a notebook cell, an agent built in a
  function, closures as tools), with the process-local state left behind:
  context variables, locks and conditions are made anew, and OpenAI-compatible
  clients and HTTP clients are rebuilt from their settings on arrival.

An object that still cannot travel fails at Flow build with the attribute path
that cannot (:class:`AgentTravelError`).
"""

from __future__ import annotations

import contextvars
import importlib
import io
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from dex_agents_ray.errors import DexAgentsError

__all__ = [
    "AgentTravelError",
    "FrameworkTraveller",
    "PerProcessValue",
    "dumps_by_value",
    "find_module_reference",
]

_LOCK_TYPES: tuple[type[Any], ...] = (type(threading.Lock()), type(threading.RLock()))
_WEAK_CONTAINERS: tuple[type[Any], ...] = (
    weakref.WeakSet,
    weakref.WeakValueDictionary,
    weakref.WeakKeyDictionary,
)


class AgentTravelError(DexAgentsError, TypeError):
    """An agent (or its ``deps``) cannot travel to the processes that run its Steps.

    Attributes:
        path: The attribute path from the agent to the object that cannot be
            pickled, such as ``agent._function_toolset.tools['lookup'].function``.
    """

    def __init__(self, what: str, path: str, cause: BaseException) -> None:
        super().__init__(
            f"{what} cannot travel to the Ray processes that run its Steps: {path} "
            f"cannot be pickled ({type(cause).__name__}: {cause}). Define it in an "
            "importable module, or keep such objects out of it (build them per process)."
        )
        self.path = path


def _new_context_var(name: str, has_default: bool, default: Any) -> contextvars.ContextVar[Any]:
    if has_default:
        return contextvars.ContextVar(name, default=default)
    return contextvars.ContextVar(name)


def _new_openai_client(kind: str, settings: dict[str, Any]) -> Any:
    import openai

    api_key = settings.pop("api_key", None)
    if api_key is None:
        api_key = os.environ.get("OPENAI_API_KEY", "")
    client_type = openai.AsyncOpenAI if kind == "async" else openai.OpenAI
    return client_type(api_key=api_key, **settings)


def _new_httpx_client(module_name: str, kind: str, timeout: Any) -> Any:
    module = importlib.import_module(module_name)
    client_type = module.AsyncClient if kind == "async" else module.Client
    return client_type(timeout=timeout)


def _openai_reduction(obj: Any) -> tuple[Any, ...] | None:
    openai = sys.modules.get("openai")
    if openai is None or not isinstance(obj, openai.AsyncOpenAI | openai.OpenAI):
        return None
    settings: dict[str, Any] = {
        "base_url": str(obj.base_url),
        "organization": obj.organization,
        "project": obj.project,
        "timeout": obj.timeout,
        "max_retries": obj.max_retries,
    }
    # A key read from the environment is read again there: never stored with the Flow.
    if obj.api_key != os.environ.get("OPENAI_API_KEY"):
        settings["api_key"] = obj.api_key
    kind = "async" if isinstance(obj, openai.AsyncOpenAI) else "sync"
    return (_new_openai_client, (kind, settings))


def _httpx_reduction(obj: Any) -> tuple[Any, ...] | None:
    # httpx, and httpx2 (the OpenAI SDK's HTTP client from openai 3 on).
    for module_name in ("httpx", "httpx2"):
        module = sys.modules.get(module_name)
        if module is None or not isinstance(obj, module.AsyncClient | module.Client):
            continue
        kind = "async" if isinstance(obj, module.AsyncClient) else "sync"
        return (_new_httpx_client, (module_name, kind, obj.timeout))
    return None


def _process_local_reduction(obj: Any) -> tuple[Any, ...] | None:
    """How to rebuild ``obj`` on arrival when it is process-local state; else ``None``."""
    kind = type(obj)
    if kind is contextvars.ContextVar:
        try:
            value = obj.get()  # the variable's default (a value set here is not kept)
        except LookupError:
            return (_new_context_var, (obj.name, False, None))
        return (_new_context_var, (obj.name, True, value))
    if kind in _LOCK_TYPES:
        return (kind, ())
    if kind is threading.Condition:
        return (threading.Condition, ())
    if kind in _WEAK_CONTAINERS:
        return (kind, ())  # a cache of live objects: empty on arrival
    return _openai_reduction(obj) or _httpx_reduction(obj)


def _pickler_type() -> type[Any]:
    from ray import cloudpickle

    class _TravelPickler(cloudpickle.CloudPickler):
        def reducer_override(self, obj: Any) -> Any:
            reduction = _process_local_reduction(obj)
            if reduction is not None:
                return reduction
            return super().reducer_override(obj)  # type: ignore[no-untyped-call]

    return _TravelPickler


def dumps_by_value(obj: object) -> bytes:
    """Pickle ``obj`` by value, leaving process-local state behind (see the module)."""
    buffer = io.BytesIO()
    _pickler_type()(buffer, protocol=5).dump(obj)
    return buffer.getvalue()


def _loads(data: bytes) -> Any:
    from ray import cloudpickle

    return cloudpickle.loads(data)


def find_module_reference(obj: object) -> tuple[str, str] | None:
    """``(module, attribute)`` of an importable module's global that is ``obj``;
    ``None`` when only ``__main__`` (or nothing) holds it."""
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name == "__main__" or module_name.startswith("__mp_main__"):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict) or getattr(module, "__file__", None) is None:
            continue
        for attribute, value in list(namespace.items()):
            if value is obj and not attribute.startswith("__"):
                return module_name, attribute
    return None


def _import_reference(module_name: str, attribute: str) -> Any:
    module = importlib.import_module(module_name)
    return getattr(module, attribute)


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for key, value in list(obj.items()):
            yield f"[{key!r}]", value
        return
    if isinstance(obj, list | tuple | set | frozenset):
        for index, value in enumerate(obj):
            yield f"[{index}]", value
        return
    closure = getattr(obj, "__closure__", None)
    if closure:
        names = getattr(getattr(obj, "__code__", None), "co_freevars", ())
        for name, cell in zip(names, closure, strict=False):
            try:
                yield f".<closure {name}>", cell.cell_contents
            except ValueError:
                continue
    for name in ("func", "args", "keywords", "__wrapped__", "__self__"):
        value = getattr(obj, name, None) if not isinstance(obj, type) else None
        if value is not None and name in ("func", "__wrapped__", "__self__"):
            yield f".{name}", value
    namespace = getattr(obj, "__dict__", None)
    if isinstance(namespace, dict) and not isinstance(obj, type):
        for key, value in list(namespace.items()):
            yield f".{key}", value
    for slot in getattr(type(obj), "__slots__", ()) or ():
        value = getattr(obj, slot, None)
        if value is not None:
            yield f".{slot}", value


def _failing_path(obj: Any, path: str, depth: int = 0) -> tuple[str, BaseException] | None:
    try:
        dumps_by_value(obj)
    except Exception as error:  # any pickling failure: find the deepest part that fails
        if depth < 12:
            for suffix, child in _children(obj):
                found = _failing_path(child, path + suffix, depth + 1)
                if found is not None:
                    return found
        return path, error
    return None


class FrameworkTraveller:
    """Holds one framework object (an agent, ``deps``) and pickles it to travel.

    Pickled, it is a reference (``module:attr``) when an importable module holds
    the object, else the object by value without its process-local state. The
    far side rebuilds it once per pickled copy.

    Args:
        obj: The object.
        what: How errors name it (``"the agent"``).

    Raises:
        AgentTravelError: ``obj`` cannot travel; the message names the attribute.
    """

    def __init__(self, obj: Any, *, what: str) -> None:
        self.value = obj
        self.what = what
        reference = find_module_reference(obj)
        if reference is not None:
            self._payload: tuple[str, Any] = ("reference", reference)
            return
        try:
            data = dumps_by_value(obj)
        except Exception as error:
            found = _failing_path(obj, what.removeprefix("the "))
            path, cause = found if found is not None else (what, error)
            raise AgentTravelError(what, path, cause) from error
        self._payload = ("value", data)

    @property
    def by_reference(self) -> str | None:
        """``"module:attr"`` when it travels by reference; ``None`` by value."""
        kind, payload = self._payload
        return f"{payload[0]}:{payload[1]}" if kind == "reference" else None

    def __reduce__(self) -> tuple[Callable[..., FrameworkTraveller], tuple[Any, ...]]:
        return (_arrive, (self._payload, self.what))


def _arrive(payload: tuple[str, Any], what: str) -> FrameworkTraveller:
    kind, data = payload
    value = _import_reference(*data) if kind == "reference" else _loads(data)
    traveller = FrameworkTraveller.__new__(FrameworkTraveller)
    traveller.value = value
    traveller.what = what
    traveller._payload = payload
    return traveller


class PerProcessValue:
    """A framework's per-run value (Pydantic AI's ``deps``, the Agents SDK's
    ``context``): one that travels (a :class:`FrameworkTraveller`), or a factory
    called once in each process that needs it.

    Raises:
        ValueError: Both ``value`` and ``factory``.
        TypeError: ``factory`` is not callable, or ``value`` cannot travel.
    """

    def __init__(self, value: Any, factory: Callable[[], Any] | None, *, what: str) -> None:
        if value is not None and factory is not None:
            raise ValueError(f"give {what} or {what}_factory, not both")
        if factory is not None and not callable(factory):
            raise TypeError(f"{what}_factory must be callable")
        self._shared = FrameworkTraveller(value, what=what) if value is not None else None
        self._factory = factory
        self._built: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        """The value; ``None`` without one."""
        if self._shared is not None:
            return self._shared.value
        if self._factory is None:
            return None
        with self._lock:
            if self._built is None:
                self._built = self._factory()
            return self._built

    def __getstate__(self) -> dict[str, Any]:
        return {"_shared": self._shared, "_factory": self._factory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._shared = state["_shared"]
        self._factory = state["_factory"]
        self._built = None
        self._lock = threading.Lock()
