"""``refund_order`` logs to ``$DEX_PERSISTED_LOG_DIR``: Ray workers take their
environment from the Ray that the test session starts, so it is set here, when
pytest collects this folder, before any fixture starts Ray."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.persisted.agents import LOG_DIR_ENV

_LOG_DIR = tempfile.mkdtemp(prefix="dex-persisted-")
os.environ[LOG_DIR_ENV] = _LOG_DIR


@pytest.fixture(scope="session")
def tool_log_dir() -> Iterator[Path]:
    """Where the fixture's tools log their calls (this test session's own folder)."""
    try:
        yield Path(_LOG_DIR)
    finally:
        shutil.rmtree(_LOG_DIR, ignore_errors=True)
