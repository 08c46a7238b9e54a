"""Inspect AI interop: cases from Inspect datasets, runs written as Inspect logs.

::

    from inspect_ai.dataset import json_dataset
    from dex_agents_ray.evals import run_eval
    from dex_agents_ray.evals.inspect import cases_from_inspect, write_inspect_log

    cases = cases_from_inspect(json_dataset("samples.jsonl"))
    report = await run_eval(flow, cases, run_id="nightly-1", out="evals/nightly-1")
    write_inspect_log(report, "logs/")  # inspect view --log-dir logs

Needs ``pip install "dex-agents-ray[inspect]"``. Importing this package is cheap
and leaves asyncio alone: ``inspect_ai`` is imported by the first call that reads
or writes its types, and the log is written without Inspect's synchronous entry
points (which patch asyncio with ``nest_asyncio`` when a loop is running).

Errors::

    EvalCaseError (ValueError)   a sample a session cannot run (field, sample ID)
    ValueError                   a file of another kind; a row without its case
    ImportError                  inspect-ai is not installed (names the extra)

See docs/evals.md.
"""

import importlib.util

from dex_agents_ray.evals.inspect._loader import MISSING_EXTRA_MESSAGE

if importlib.util.find_spec("inspect_ai") is None:
    try:
        import inspect_ai  # noqa: F401 - fails fast: the spec lookup found nothing
    except ImportError as _error:
        raise ImportError(MISSING_EXTRA_MESSAGE) from _error

from dex_agents_ray.evals.inspect._cases import (  # noqa: E402
    REFUSED_SAMPLE_FIELDS,
    cases_from_inspect,
    read_inspect_cases,
)
from dex_agents_ray.evals.inspect._log import (  # noqa: E402
    DEFAULT_MODEL_PREFIX,
    build_inspect_log,
    write_inspect_log,
)
from dex_agents_ray.evals.inspect._messages import read_transcripts  # noqa: E402

__all__ = [
    "DEFAULT_MODEL_PREFIX",
    "MISSING_EXTRA_MESSAGE",
    "REFUSED_SAMPLE_FIELDS",
    "build_inspect_log",
    "cases_from_inspect",
    "read_inspect_cases",
    "read_transcripts",
    "write_inspect_log",
]
