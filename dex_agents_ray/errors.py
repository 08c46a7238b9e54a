"""The root of the package's own errors: ``except DexAgentsError`` catches every
exception class dex-agents-ray defines, as ``httpx.HTTPError`` or
``temporalio.exceptions.TemporalError`` catch theirs.

Each error keeps the base the spec (or its meaning) gives it besides the root, so
``except ValueError`` still catches an ``ImageValidationError``. The tree::

    DexAgentsError
    ├── ToolExecutionError            (session) raised by a tool: the model sees it, ``failed``
    ├── ToolOutcomeUnknownError       (session) raised by a tool: a write may have happened
    ├── ImageValidationError          (media, also ValueError) bad image bytes or reference
    ├── MediaStoreError               (media, also RuntimeError) a store failed to write or read
    ├── EngineError                   (engine, also RuntimeError) a failure inside the engine
    │     ├── StoreUnavailableError, HostCallError, HostPassivatedError, HostNotStartedError
    ├── StaleEpochError               (engine store, also RuntimeError) a superseded host committed
    ├── InvalidStreamTokenError       (engine, also dex's DexServiceError) a token it did not write
    ├── InvalidAgentEventResumeTokenError  (ui_stream, also ValueError) answer 400
    ├── ModelResponseError            (built-in loop, also RuntimeError) an unusable response
    ├── AgentTravelError              (built-in loop, also TypeError) an agent that cannot pickle
    ├── McpToolCallInterruptedError, McpConnectionError           (mcp)
    ├── RetryError, ConnectorManifestError (also ValueError), ... (connectors)
    ├── EvalCaseError                 (evals, also ValueError) a case that cannot be read
    └── the package's internal signals (each also its natural base)

The SDK's errors the engine raises as the Dex server would (``FlowNotFoundError``,
``RpcLockConflictError``, ``LongPollTimeoutError``, ...) stay the SDK's own
classes. ``tests/test_structure.py`` checks every exception class of the package
derives from :class:`DexAgentsError`.
"""

from __future__ import annotations

__all__ = ["DexAgentsError"]


class DexAgentsError(Exception):
    """The base of every exception class dex-agents-ray defines."""
