"""Durable-execution peers on the agent-loop workload of shared/research/perf-peers.md.

Each system module (``plain``, ``sqlite_floor``, ``dbos_peer``, ``langgraph_peer``,
``restate_peer``) has ``open_system(workdir, variant)``, an async context manager
that yields an object with ``async session(session_id)`` running one workload
session (``workload.py``).
``run.py`` runs one job per process: ``python -m benchmarks.peers.run SYSTEM[:VARIANT]
C [N]`` prints one JSON line, and ``run.run_job(...)`` does it in a fresh subprocess
for another benchmark. DBOS, LangGraph and Restate need the ``bench`` extra;
Restate also needs its server binary (``scripts/install-restate``).
``ray_env.use_repository()`` readies a benchmark run as a file for Ray: the
repository on the driver's and the workers' import paths, Ray's token auth off.

This package imports nothing at import time, so ``python -m benchmarks.peers.run``
loads ``run`` once.
"""

__all__: list[str] = []
