"""The dex SDK version the engine's use of its private names was written for."""

from __future__ import annotations

import importlib.metadata

__all__ = ["SDK_DISTRIBUTION", "SDK_VERSION", "check_sdk_version", "installed_sdk_version"]

SDK_DISTRIBUTION = "dex-python-sdk"
SDK_VERSION = "1.23.0"
"""The release every private name in ``engine/sdk/`` was read from (and the pin
in ``pyproject.toml``): another release may rename or change any of them."""


def installed_sdk_version() -> str | None:
    """The installed ``dex-python-sdk`` version; ``None`` when its metadata is missing."""
    try:
        return importlib.metadata.version(SDK_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_sdk_version(installed: str | None) -> None:
    """Refuse an SDK release other than :data:`SDK_VERSION`.

    Raises:
        ImportError: ``installed`` is another version (or unknown); the message
            names both.
    """
    if installed == SDK_VERSION:
        return
    found = "no installed version (its metadata is missing)" if installed is None else installed
    raise ImportError(
        f"dex_agents_ray's engine was written for {SDK_DISTRIBUTION}=={SDK_VERSION} (it uses "
        f"that release's private names), but {SDK_DISTRIBUTION} {found} is installed here; "
        f'install the release it was written for: pip install "{SDK_DISTRIBUTION}=={SDK_VERSION}"'
    )
