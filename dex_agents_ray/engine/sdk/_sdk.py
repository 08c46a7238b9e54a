"""Every private name of the dex SDK (``dex-python-sdk==1.23.0``) the engine uses.

The engine is the SDK's Worker and Server in one process, so it reuses the
SDK's own invocation context, value mapping and result mapping rather than
copying them. Those live behind private names; importing them only here makes
the dependency one list to check when the SDK moves (a test keeps every other
module off them).
"""

from __future__ import annotations

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
from dex.flow import _RegisteredFlow, _RegisteredStep

__all__ = [
    "HARD_DELETE_ATTRIBUTE_PROTOCOL_VERSION",
    "InvocationContext",
    "InvocationMethod",
    "NegotiatedServerProtocol",
    "RegisteredFlow",
    "RegisteredStep",
    "ValueMapper",
    "WorkerDispatcher",
    "apply_attribute_store_sync",
    "apply_hard_delete_on_null",
    "require_map_instance",
    "supports_automatic_json",
    "type_name",
]

RegisteredFlow = _RegisteredFlow
RegisteredStep = _RegisteredStep
apply_attribute_store_sync = _apply_attribute_store_sync
apply_hard_delete_on_null = _apply_hard_delete_on_null
supports_automatic_json = _supports_automatic_json
type_name = _type_name
