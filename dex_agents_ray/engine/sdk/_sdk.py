"""Every private name of the dex SDK (``dex-python-sdk==1.23.0``) the engine uses.

The engine is the SDK's Worker and Server in one process, so it reuses the
SDK's own invocation context, value mapping and result mapping rather than
copying them. Those live behind private names; importing them only here, and
reading private attributes of SDK objects only in this package (through the
functions below, outside ``_invoke``, ``_codecs`` and ``_stored``), makes the
dependency one list to check when the SDK moves (tests keep every other module
off them; ``sdk/__init__`` checks the installed version).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dex import Flow, Registry, RPCInvokeOptions, StartFlowOptions
from dex._invocation_context import InvocationContext, InvocationMethod
from dex._server_protocol import (
    HARD_DELETE_ATTRIBUTE_PROTOCOL_VERSION,
    NegotiatedServerProtocol,
)
from dex._utils import require_map_instance
from dex._value_mapper import ValueMapper
from dex._worker_dispatcher import WorkerDispatcher
from dex.attribute import _apply_attribute_store_sync, _apply_hard_delete_on_null
from dex.codec import _supports_automatic_json, _type_name
from dex.flow import _RegisteredFlow, _RegisteredRPC, _RegisteredStep
from dex.flow_options import _AttributeInitialization

__all__ = [
    "HARD_DELETE_ATTRIBUTE_PROTOCOL_VERSION",
    "AttributeInitialization",
    "InvocationContext",
    "InvocationMethod",
    "NegotiatedServerProtocol",
    "RegisteredFlow",
    "RegisteredRPC",
    "RegisteredStep",
    "ValueMapper",
    "WorkerDispatcher",
    "apply_attribute_store_sync",
    "apply_hard_delete_on_null",
    "attribute_initializations",
    "flow_by_type",
    "flow_for_instance",
    "require_map_instance",
    "resolve_rpc_invoke_options",
    "rpc_for_method",
    "supports_automatic_json",
    "type_name",
]

AttributeInitialization = _AttributeInitialization
RegisteredFlow = _RegisteredFlow
RegisteredRPC = _RegisteredRPC
RegisteredStep = _RegisteredStep
apply_attribute_store_sync = _apply_attribute_store_sync
apply_hard_delete_on_null = _apply_hard_delete_on_null
supports_automatic_json = _supports_automatic_json
type_name = _type_name


def flow_by_type(registry: Registry, flow_type: str) -> RegisteredFlow:
    """The registered Flow of ``flow_type``.

    Raises:
        FlowDefinitionError: No Flow of that type is registered.
    """
    return registry._flow_by_type(flow_type)


def flow_for_instance(registry: Registry, flow: Flow[Any]) -> RegisteredFlow:
    """The registered form of the very ``flow`` object.

    Raises:
        FlowDefinitionError: ``flow`` is not the registered instance of its type.
    """
    return registry._flow_for_instance(flow)


def rpc_for_method(
    registry: Registry, method: Callable[..., Any]
) -> tuple[RegisteredFlow, RegisteredRPC]:
    """The registered Flow and RPC of a bound ``@rpc`` method.

    Raises:
        FlowDefinitionError: ``method`` is no registered RPC.
    """
    return registry._rpc_for_method(method)


def resolve_rpc_invoke_options(
    registry: Registry, flow: RegisteredFlow, options: RPCInvokeOptions
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """An RPC call's (locks, Attribute loads, Channel loads) as physical names,
    checked against ``flow`` as the SDK's client checks them."""
    return registry._resolve_rpc_invoke_options(flow, options)


def attribute_initializations(options: StartFlowOptions) -> tuple[AttributeInitialization, ...]:
    """The Attribute values ``options.with_attribute`` set, in order."""
    return options._attribute_initializations
