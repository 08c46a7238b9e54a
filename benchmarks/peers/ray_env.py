"""The environment a benchmark's Ray processes start in.

A benchmark run as a file (``python benchmarks/evals.py``) puts the repository on
``sys.path`` itself, to import this module, then calls :func:`use_repository`
before it imports the package or starts Ray.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["REPOSITORY", "use_repository"]

REPOSITORY = str(Path(__file__).resolve().parents[2])


def use_repository() -> None:
    """Put the repository first on ``sys.path`` and on ``PYTHONPATH`` (Ray workers
    unpickle the benchmark's Steps and tools by reference, so they import it too),
    and turn Ray's token authentication off unless the caller set it."""
    if sys.path[0] != REPOSITORY:
        sys.path.insert(0, REPOSITORY)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (REPOSITORY, os.environ.get("PYTHONPATH", "")) if p
    )
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
