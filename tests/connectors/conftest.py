"""Connector test fixtures: the test Connector packages, installed, and the provider.

The packages under ``packages/`` are real installable packages (a
``pyproject.toml``, a ``dex-connector.json`` shipped as package data). They are
installed here, while pytest collects, with ``pip install --no-deps
--no-build-isolation --no-index --target`` into a temporary directory. That
directory goes on ``sys.path`` and on ``PYTHONPATH`` before the session's
``ray.init`` (a fixture, so after collection): every Ray worker inherits it and
imports the packages by name when it unpickles an agent's Flow, as a worker
with the packages installed would. Installing into the virtual environment
instead would leave them there after the run; a runtime_env per job would not
reach the workers the shared test cluster already started.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.connectors.provider import Provider

PACKAGES = Path(__file__).resolve().parent / "packages"


def _install_packages() -> Path:
    target = Path(tempfile.mkdtemp(prefix="dex-connector-packages-"))
    atexit.register(shutil.rmtree, target, True)
    build = Path(tempfile.mkdtemp(prefix="dex-connector-build-"))
    try:
        # Build from copies: setuptools writes build/ and egg-info next to the sources.
        sources = [shutil.copytree(path, build / path.name) for path in sorted(PACKAGES.iterdir())]
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
        command += ["--no-build-isolation", "--no-index", "--target", str(target)]
        done = subprocess.run(
            command + [str(source) for source in sources],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        shutil.rmtree(build, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(
            "could not install the test Connector packages (the dev extra brings setuptools "
            f"and wheel):\n{done.stdout}\n{done.stderr}"
        )
    return target


_TARGET = str(_install_packages())
sys.path.append(_TARGET)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (os.environ.get("PYTHONPATH", ""), _TARGET) if p
)


@pytest.fixture
def provider() -> Iterator[Provider]:
    server = Provider()
    server.start()
    try:
        yield server
    finally:
        server.stop()
