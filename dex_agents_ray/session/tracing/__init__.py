"""The session's tracing (OpenTelemetry spans) and Ray metrics, around its Steps.

Rooms, bottom up; each imports only rooms above it in this list:

- ``_relay_address`` (where a pickled copy of the options sends its spans),
  ``_failures`` (the log of a failed OpenTelemetry call), ``_notes`` (what a
  Step's body tells its spans) and ``_metrics`` (the Ray metrics);
- ``_relay``: spans of other processes relayed to the process that built the
  options (OpenTelemetry's SDK and Ray);
- ``_otel``: every OpenTelemetry call, guarded (the API);
- ``_options``: ``AgentTracingOptions`` and ``GenAISemanticConventionsVersion``,
  exported by ``dex_agents_ray.session``;
- ``_step_hooks``: ``StepHooks``, the spans and metrics of one Flow definition;
- ``_decorators``: ``activation_step``, ``approval_step``, ``model_step`` and
  ``tool_step``, the one decorator on each traced Step's ``execute``.

OpenTelemetry is imported (by ``_otel`` and ``_relay``, from inside functions)
only when tracing is enabled. The session's other modules import these rooms by
path: this front is empty, so importing the options (as ``_api`` does) loads
no Step code.
"""
