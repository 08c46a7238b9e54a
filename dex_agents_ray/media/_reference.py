"""The image reference that session state holds, and the limits on images."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ._errors import ImageValidationError

__all__ = [
    "MAX_IMAGES_PER_MESSAGE",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_URI_LENGTH",
    "AgentImageReference",
    "ImageMimeType",
]

MAX_IMAGE_BYTES = 3_750_000
"""Largest image, in bytes. Its base64 text is 5,000,000 bytes, which fits the
per-image limits of Amazon Bedrock (5 MB of base64) and the Claude API (10 MB)."""

MAX_IMAGES_PER_MESSAGE = 20
"""Most images one user message or one tool result carries."""

MAX_IMAGE_URI_LENGTH = 1024
"""Longest image ``uri``, in bytes of its UTF-8 text, in every core."""


class ImageMimeType(StrEnum):
    """The image types sessions accept, detected from the bytes."""

    PNG = "image/png"
    JPEG = "image/jpeg"
    GIF = "image/gif"
    WEBP = "image/webp"


_WIRE_KEYS = ("type", "uri", "mime_type", "sha256", "size_bytes")


@dataclass(frozen=True, kw_only=True)
class AgentImageReference:
    """One image in a media store, as session state holds it; never the bytes.

    Build one with a store's ``put_image`` (or ``build_image_reference`` in a
    store of your own) rather than by hand. The wire form is
    ``{"type": "image", "uri": ..., "mime_type": ..., "sha256": ..., "size_bytes": ...}``.
    """

    uri: str
    """Where the bytes are: the store's URI followed by ``/sha256/<sha256>``, at
    most ``MAX_IMAGE_URI_LENGTH`` bytes as UTF-8."""

    mime_type: str
    """One of ``ImageMimeType``'s values, detected from the bytes."""

    sha256: str
    """SHA-256 of the bytes, 64 lowercase hexadecimal digits; the object key."""

    size_bytes: int
    """Length of the bytes, from 1 to ``MAX_IMAGE_BYTES``."""

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, keys in the spec's order."""
        return {
            "type": "image",
            "uri": self.uri,
            "mime_type": self.mime_type,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> AgentImageReference:
        """Decode the wire form and validate it.

        Raises:
            ImageValidationError: ``value`` is not an image reference object, has
                unknown or missing keys, or breaks a rule of
                ``validate_image_reference``.
        """
        from ._validation import validate_image_reference

        if not isinstance(value, Mapping):
            raise ImageValidationError(
                f"an image reference must be a JSON object, got {type(value).__name__}",
                field="images",
            )
        if value.get("type") != "image":
            raise ImageValidationError(
                f'an image reference must have "type": "image", got {value.get("type")!r}',
                field="type",
            )
        unknown = sorted(str(key) for key in value if key not in _WIRE_KEYS)
        if unknown:
            raise ImageValidationError(
                f"an image reference has unknown keys: {', '.join(unknown)}", field=unknown[0]
            )
        missing = [key for key in _WIRE_KEYS if key not in value]
        if missing:
            raise ImageValidationError(
                f"an image reference lacks keys: {', '.join(missing)}", field=missing[0]
            )
        reference = cls(
            uri=value["uri"],
            mime_type=value["mime_type"],
            sha256=value["sha256"],
            size_bytes=value["size_bytes"],
        )
        validate_image_reference(reference)
        return reference
