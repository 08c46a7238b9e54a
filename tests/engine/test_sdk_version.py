"""The engine refuses a dex SDK release other than the one its private names come from."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dex_agents_ray.engine.sdk._version import (
    SDK_VERSION,
    check_sdk_version,
    installed_sdk_version,
)


def test_the_installed_sdk_is_the_one_the_engine_was_written_for() -> None:
    assert installed_sdk_version() == SDK_VERSION == "1.23.0"
    check_sdk_version(SDK_VERSION)


@pytest.mark.parametrize("installed", ["1.24.0", "1.22.9", None])
def test_another_release_is_refused_naming_both_versions(installed: str | None) -> None:
    with pytest.raises(ImportError) as raised:
        check_sdk_version(installed)
    message = str(raised.value)
    assert "dex-python-sdk==1.23.0" in message
    assert (installed or "no installed version") in message


def test_importing_the_engine_with_another_release_fails_at_once() -> None:
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '9.0.0' if name == 'dex-python-sdk' else real(name)\n"
        "import dex_agents_ray.engine\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "ImportError: dex_agents_ray's engine was written for dex-python-sdk==1.23.0" in (
        done.stderr
    )
    assert "dex-python-sdk 9.0.0 is installed" in done.stderr
