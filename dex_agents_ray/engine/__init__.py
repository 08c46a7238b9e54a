"""The durable engine: real ``dex.Flow`` definitions run by Ray actors over a store.

Start one with :meth:`FlowEngine.start` (its options as keywords or one
:class:`EngineOptions`); operate runs with its
:class:`EngineClient` (``engine.client``) or :class:`SyncEngineClient`
(``engine.sync_client()``), whose methods mirror ``dex.AsyncClient``.
Mark a Step (or one movement) to run on Ray with :class:`RemoteStepOptions`:
on pooled executor actors of its resource shape (the default), or as a Ray
task per attempt (``RayTaskOptions(execution=RemoteExecution.TASK)``).
Mark a Step class :func:`effect_free` when its handlers change nothing outside
the run: its completion is then written while the next in-host Steps start.
An RPC shows the messages a Step's wait took and its ``execute`` has not yet
committed with :func:`taken_channel_messages`. :func:`utc_now` is the engine's
clock (wall time plus what ``FlowEngine.advance_clock`` added), and
:func:`share_decoded_values` lets every process decode each stored JSON text of
an immutable value class once.
"""

from dex_agents_ray.engine import _moved
from dex_agents_ray.engine._client import (
    EXECUTE_COMPLETED_EVENT,
    EngineClient,
    StepHistoryEntry,
)
from dex_agents_ray.engine._clock import utc_now
from dex_agents_ray.engine._engine import FlowEngine
from dex_agents_ray.engine._engine_options import EngineOptions
from dex_agents_ray.engine._errors import (
    EngineError,
    HostCallError,
    InvalidStreamTokenError,
    StoreUnavailableError,
)
from dex_agents_ray.engine._exit_hooks import on_clean_exit
from dex_agents_ray.engine._options import (
    EngineRecoveryErrorInfo,
    ExecutorPoolOptions,
    RayTaskOptions,
    RemoteExecution,
    RemoteStepOptions,
    RetentionOptions,
    StepAttemptProgress,
)
from dex_agents_ray.engine._sync import SyncEngineClient
from dex_agents_ray.engine.actors._placement import Placement, PlacementMode
from dex_agents_ray.engine.run._effect_free import effect_free
from dex_agents_ray.engine.sdk._codecs import share_decoded_values
from dex_agents_ray.engine.sdk._invoke import taken_channel_messages
from dex_agents_ray.engine.store._store import (
    FlowStore,
    PostgresStoreConfig,
    SqliteStoreConfig,
    StaleEpochError,
    StoreConfig,
)

# Old flat module paths (``engine._codecs`` ...) still import, for stored pickles.
_moved.install()

__all__ = [
    "EXECUTE_COMPLETED_EVENT",
    "EngineClient",
    "EngineError",
    "EngineRecoveryErrorInfo",
    "ExecutorPoolOptions",
    "RetentionOptions",
    "FlowEngine",
    "FlowStore",
    "HostCallError",
    "InvalidStreamTokenError",
    "Placement",
    "PlacementMode",
    "PostgresStoreConfig",
    "RayTaskOptions",
    "RemoteExecution",
    "RemoteStepOptions",
    "SqliteStoreConfig",
    "StaleEpochError",
    "StepAttemptProgress",
    "StepHistoryEntry",
    "StoreConfig",
    "StoreUnavailableError",
    "SyncEngineClient",
    "effect_free",
    "on_clean_exit",
    "taken_channel_messages",
    "share_decoded_values",
    "utc_now",
    "EngineOptions",
]
