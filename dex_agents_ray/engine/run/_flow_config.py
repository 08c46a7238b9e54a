"""``FlowConfig`` on this engine, and what ``get_attributes`` may read.

Of ``dex.FlowConfig`` (given at start as ``StartFlowOptions.config_override`` or
later to ``update_flow_config``) this engine applies ``active_step_search_mode``:
which of a run's active Steps its ``ActiveStepTypes`` search index lists. The
run row keeps the mode, so every later commit of the run indexes by it.
``step_durability`` is accepted and changes nothing: this engine commits every
Step result before the run moves on, which is ``SYNC`` and stronger than
``ASYNC``. The other fields name machinery this engine does not have
(continue-as-new, Worker endpoints, Attribute Stores) and are refused with an
error naming the field, so a setting never passes silently.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from dex import ActiveStepSearchMode, Attribute, AttributeMap, AttributeMapLoad, FlowConfig
from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine.store._records import ExecRecord

__all__ = [
    "DEFAULT_SEARCH_MODE",
    "attribute_keys",
    "indexed_step_types",
    "search_mode",
]

DEFAULT_SEARCH_MODE = ActiveStepSearchMode.DEFAULT.value
"""A run's mode when no config set one: this engine indexes every active Step."""

_UNSUPPORTED = {
    "continue_as_new_threshold": "this engine has no continue-as-new",
    "continue_as_new_page_size_bytes": "this engine has no continue-as-new",
    "worker_target": "handlers run in this engine's hosts, not at a Worker endpoint",
    "attribute_store_names": "this engine has no Attribute Stores",
}


def search_mode(config: FlowConfig | None, where: str) -> str | None:
    """The ``active_step_search_mode`` of ``config`` as the run row stores it;
    ``None`` when it sets none.

    Raises:
        TypeError: ``config`` is not a ``dex.FlowConfig`` or its mode not an
            ``ActiveStepSearchMode``.
        ValueError: ``config`` sets a field this engine does not apply.
    """
    if config is None:
        return None
    if not isinstance(config, FlowConfig):
        raise TypeError(f"{where} must be a dex.FlowConfig, got {type(config).__name__}")
    for name, why in _UNSUPPORTED.items():
        if getattr(config, name) is not None:
            raise ValueError(f"{where}.{name}: not supported ({why}); leave it None")
    mode = config.active_step_search_mode
    if mode is None:
        return None
    if not isinstance(mode, ActiveStepSearchMode):
        raise TypeError(
            f"{where}.active_step_search_mode must be an ActiveStepSearchMode, got {mode!r}"
        )
    return mode.value


def indexed_step_types(active: Iterable[ExecRecord], mode: str) -> list[str]:
    """The Step types the ``ActiveStepTypes`` index lists for a run whose active
    executions are ``active``, under its search ``mode``."""
    if mode == ActiveStepSearchMode.DISABLED.value:
        return []
    if mode == ActiveStepSearchMode.WITH_WAIT_FOR.value:
        return sorted({e.step_type for e in active if _has_wait_for(e.options)})
    return sorted({e.step_type for e in active})


@functools.lru_cache(maxsize=1024)
def _has_wait_for(options: bytes) -> bool:
    """Whether the Step of these serialized ``StepOptions`` defines ``wait_for``
    (a run's executions of one Step type mostly share their options' bytes)."""
    return not pb.StepOptions.FromString(options).skip_wait_for


def attribute_keys(
    reads: Sequence[Attribute[Any] | AttributeMapLoad], persistence: Any, flow_type: str
) -> list[tuple[str, type[Any]]]:
    """The stored key and value type of each read, checked against the Flow's
    registered ``persistence`` (name to definition).

    Raises:
        TypeError: ``reads`` is not a sequence of Attributes and
            ``AttributeMap.load(instance)`` selections.
        ValueError: A read names an Attribute the Flow does not register.
    """
    if isinstance(reads, str | bytes) or not isinstance(reads, Sequence):
        raise TypeError("get_attributes: reads must be a sequence (a list or tuple)")
    keys: list[tuple[str, type[Any]]] = []
    for index, read in enumerate(reads):
        if isinstance(read, AttributeMap):
            raise TypeError(
                f"get_attributes: reads[{index}] is AttributeMap {read.name!r}: read one "
                "instance of it, as the_map.load(instance)"
            )
        if isinstance(read, AttributeMapLoad):
            definition: Attribute[Any] | AttributeMap[Any] = read.attribute_map
            key = read.physical_name
        elif isinstance(read, Attribute):
            definition, key = read, read.name
        else:
            raise TypeError(
                f"get_attributes: reads[{index}] must be an Attribute or an "
                f"AttributeMap.load(instance), got {type(read).__name__}"
            )
        if persistence.get(definition.name) is not definition:
            kind = type(definition).__name__
            raise ValueError(
                f"get_attributes: reads[{index}]: {kind} {definition.name!r} is not an "
                f"Attribute of Flow {flow_type}"
            )
        keys.append((key, definition.value_type))
    return keys
