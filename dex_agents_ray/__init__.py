"""Durable AI-agent sessions on Ray.

The engine (:mod:`dex_agents_ray.engine`) runs real ``dex-python-sdk`` Flow
definitions durably on Ray; the session (:mod:`dex_agents_ray.session`), the
built-in loop and the integrations build on it. The session's public names
are re-exported here, as the spec's ``dex_agents`` exports them::

    from dex_agents_ray import AgentSessionClient, AgentSessionFlow, AgentSessionOptions

So are the spec's image names (``AgentImageReference``, the media stores, the
limits and the checks), which live in :mod:`dex_agents_ray.media`; the Ray
object store cache stays there. ``DexAgentsError`` (:mod:`dex_agents_ray.errors`) is
the root of every exception class the package defines.

The names are imported on first use (PEP 562): a Ray worker that hosts engine
runs imports ``dex_agents_ray.engine`` and never pays for the session and media
modules it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dex_agents_ray.errors import DexAgentsError
    from dex_agents_ray.media import (
        MAX_IMAGE_BYTES,
        MAX_IMAGE_URI_LENGTH,
        MAX_IMAGES_PER_MESSAGE,
        AgentImageReference,
        ImageValidationError,
        InMemoryMediaStore,
        LocalDirectoryMediaStore,
        MediaStore,
        MediaStoreError,
        build_image_reference,
        collect_turn_images,
        load_images,
        require_short_image_uris,
        require_store_image_reference,
        validate_image_reference,
        validate_image_references,
        verify_image_bytes,
    )
    from dex_agents_ray.session import *  # noqa: F403 - the session's public names
    from dex_agents_ray.session import __all__ as _session_all

    __all__: list[str] = list(_session_all)
    __all__ += [
        "MAX_IMAGES_PER_MESSAGE",
        "MAX_IMAGE_BYTES",
        "MAX_IMAGE_URI_LENGTH",
        "AgentImageReference",
        "ImageValidationError",
        "InMemoryMediaStore",
        "LocalDirectoryMediaStore",
        "MediaStore",
        "MediaStoreError",
        "build_image_reference",
        "collect_turn_images",
        "load_images",
        "require_short_image_uris",
        "require_store_image_reference",
        "validate_image_reference",
        "validate_image_references",
        "verify_image_bytes",
        "DexAgentsError",
    ]

_MEDIA_NAMES = (
    "MAX_IMAGES_PER_MESSAGE",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_URI_LENGTH",
    "AgentImageReference",
    "ImageValidationError",
    "InMemoryMediaStore",
    "LocalDirectoryMediaStore",
    "MediaStore",
    "MediaStoreError",
    "build_image_reference",
    "collect_turn_images",
    "load_images",
    "require_short_image_uris",
    "require_store_image_reference",
    "validate_image_reference",
    "validate_image_references",
    "verify_image_bytes",
)
"""The spec's image names, from :mod:`dex_agents_ray.media`, after the session's."""

_OWN_NAMES = ("DexAgentsError",)
"""Ours, from :mod:`dex_agents_ray.errors`, last."""

_SUBPACKAGES = frozenset({"engine", "errors", "media", "session"})
"""Subpackages the eager ``__init__`` used to import, still reachable as attributes."""


def _session() -> Any:
    return importlib.import_module("dex_agents_ray.session")


def _export(name: str) -> Any:
    if name == "__all__":
        return [*_session().__all__, *_MEDIA_NAMES, *_OWN_NAMES]
    if name in _OWN_NAMES:
        return getattr(importlib.import_module("dex_agents_ray.errors"), name)
    if name in _MEDIA_NAMES:
        return getattr(importlib.import_module("dex_agents_ray.media"), name)
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    session = _session()
    if name in session.__all__:
        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        value = _export(name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_export("__all__")})
