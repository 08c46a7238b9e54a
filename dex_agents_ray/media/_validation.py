"""Checks on image bytes and references that every store and the session share."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ._errors import ImageValidationError, MediaStoreError
from ._formats import check_image_structure, image_structure_problem
from ._reference import (
    MAX_IMAGE_BYTES,
    MAX_IMAGE_URI_LENGTH,
    MAX_IMAGES_PER_MESSAGE,
    AgentImageReference,
    ImageMimeType,
)

__all__ = [
    "build_image_reference",
    "image_uri",
    "require_short_image_uris",
    "require_store_image_reference",
    "validate_image_reference",
    "validate_image_references",
    "verify_image_bytes",
]

_HEX = frozenset("0123456789abcdef")
_MIME_TYPES = frozenset(kind.value for kind in ImageMimeType)
# "/sha256/" and 64 hexadecimal digits.
_KEY_SUFFIX_LENGTH = len("/sha256/") + 64


def _utf8_length(text: str) -> int | None:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def image_uri(store_uri: str, sha256: str) -> str:
    """The URI of the image with ``sha256`` in the store at ``store_uri``."""
    return f"{store_uri}/sha256/{sha256}"


def _check_reference(reference: object, where: str) -> None:
    if not isinstance(reference, AgentImageReference):
        raise ImageValidationError(
            f"{where or 'an image'} must be an AgentImageReference, got {type(reference).__name__}",
            field=where or "images",
        )
    prefix = f"{where}." if where else ""

    sha256 = reference.sha256
    if not isinstance(sha256, str) or len(sha256) != 64 or not _HEX.issuperset(sha256):
        raise ImageValidationError(
            f"image reference {prefix}sha256 must be 64 lowercase hexadecimal digits, "
            f"got {sha256!r:.80}",
            field=f"{prefix}sha256",
        )
    size = reference.size_bytes
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_IMAGE_BYTES:
        raise ImageValidationError(
            f"image reference {prefix}size_bytes must be an integer from 1 to "
            f"MAX_IMAGE_BYTES ({MAX_IMAGE_BYTES:,}), got {size!r:.40}",
            field=f"{prefix}size_bytes",
        )
    if reference.mime_type not in _MIME_TYPES:
        raise ImageValidationError(
            f"image reference {prefix}mime_type must be one of {', '.join(sorted(_MIME_TYPES))}, "
            f"got {reference.mime_type!r:.80}",
            field=f"{prefix}mime_type",
        )
    uri = reference.uri
    if not isinstance(uri, str):
        raise ImageValidationError(
            f"image reference {prefix}uri must be a string, got {type(uri).__name__}",
            field=f"{prefix}uri",
        )
    length = _utf8_length(uri)
    if length is None:
        raise ImageValidationError(
            f"image reference {prefix}uri is not valid Unicode text", field=f"{prefix}uri"
        )
    if length > MAX_IMAGE_URI_LENGTH:
        raise ImageValidationError(
            f"image reference {prefix}uri is {length} bytes as UTF-8; the limit is "
            f"MAX_IMAGE_URI_LENGTH ({MAX_IMAGE_URI_LENGTH})",
            field=f"{prefix}uri",
        )
    if len(uri) <= _KEY_SUFFIX_LENGTH or not uri.endswith(f"/sha256/{sha256}"):
        raise ImageValidationError(
            f"image reference {prefix}uri must be a store URI followed by /sha256/<sha256>, "
            f"got {uri!r:.200}",
            field=f"{prefix}uri",
        )


def validate_image_reference(reference: AgentImageReference) -> None:
    """Check one reference's fields.

    Raises:
        ImageValidationError: A field breaks a rule: ``sha256`` is not 64
            lowercase hexadecimal digits, ``size_bytes`` is not an integer from 1
            to ``MAX_IMAGE_BYTES``, ``mime_type`` is not a supported type, or
            ``uri`` is longer than ``MAX_IMAGE_URI_LENGTH`` UTF-8 bytes or does
            not end in ``/sha256/<sha256>``. ``field`` names it.
    """
    _check_reference(reference, "")


def validate_image_references(references: Sequence[AgentImageReference]) -> None:
    """Check the images of one message or tool result.

    Raises:
        ImageValidationError: ``references`` is not a list or tuple, holds more
            than ``MAX_IMAGES_PER_MESSAGE``, or one of them breaks a rule of
            ``validate_image_reference`` (``field`` is then ``images[<n>].<name>``).
    """
    if not isinstance(references, list | tuple):
        raise ImageValidationError(
            f"images must be a list of AgentImageReference, got {type(references).__name__}",
            field="images",
        )
    if len(references) > MAX_IMAGES_PER_MESSAGE:
        raise ImageValidationError(
            f"a message or tool result carries at most MAX_IMAGES_PER_MESSAGE "
            f"({MAX_IMAGES_PER_MESSAGE}) images, got {len(references)}",
            field="images",
        )
    for index, reference in enumerate(references):
        _check_reference(reference, f"images[{index}]")


def require_short_image_uris(store_uri: str) -> None:
    """Refuse a store location whose image URIs would be too long.

    Call it in a store's constructor. ``store_uri`` is what image URIs start
    with; each one is ``<store_uri>/sha256/<64 hex digits>``.

    Raises:
        ValueError: ``store_uri`` is empty, ends in ``/``, is not valid Unicode,
            or would make image URIs longer than ``MAX_IMAGE_URI_LENGTH`` bytes
            as UTF-8.
    """
    if not isinstance(store_uri, str) or not store_uri:
        raise ValueError(f"a media store URI must be a non-empty string, got {store_uri!r}")
    if store_uri.endswith("/"):
        raise ValueError(f"a media store URI must not end in '/', got {store_uri!r:.200}")
    length = _utf8_length(store_uri)
    if length is None:
        raise ValueError("a media store URI must be valid Unicode text")
    if length + _KEY_SUFFIX_LENGTH > MAX_IMAGE_URI_LENGTH:
        raise ValueError(
            f"media store URI {store_uri!r:.80}... is {length} bytes as UTF-8, so its image "
            f"URIs would be {length + _KEY_SUFFIX_LENGTH} bytes, over MAX_IMAGE_URI_LENGTH "
            f"({MAX_IMAGE_URI_LENGTH}); use a shorter bucket, prefix or directory"
        )


def build_image_reference(data: bytes, store_uri: str) -> AgentImageReference:
    """Check image bytes and build their reference in the store at ``store_uri``.

    Raises:
        ImageValidationError: ``data`` is empty, larger than ``MAX_IMAGE_BYTES``,
            or not a well-formed PNG, JPEG, GIF or WebP image (``field="data"``).
        ValueError: ``store_uri`` breaks ``require_short_image_uris``.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ImageValidationError(
            f"image data must be bytes, got {type(data).__name__}", field="data"
        )
    data = bytes(data)
    if not data:
        raise ImageValidationError("the image is empty", field="data")
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageValidationError(
            f"the image is {len(data):,} bytes; the limit is MAX_IMAGE_BYTES ({MAX_IMAGE_BYTES:,})",
            field="data",
        )
    mime_type = check_image_structure(data)
    require_short_image_uris(store_uri)
    sha256 = hashlib.sha256(data).hexdigest()
    return AgentImageReference(
        uri=image_uri(store_uri, sha256),
        mime_type=mime_type.value,
        sha256=sha256,
        size_bytes=len(data),
    )


def require_store_image_reference(reference: AgentImageReference, store_uri: str) -> str:
    """Check that a store may read ``reference``; return its SHA-256, the object name.

    Raises:
        ImageValidationError: ``reference`` breaks ``validate_image_reference``.
        MediaStoreError: ``reference.uri`` is not exactly
            ``<store_uri>/sha256/<sha256>``, so the image is not in this store.
    """
    validate_image_reference(reference)
    if reference.uri != image_uri(store_uri, reference.sha256):
        raise MediaStoreError(
            f"image {reference.uri!r} is not in the media store at {store_uri!r}",
            uri=reference.uri,
        )
    return reference.sha256


def verify_image_bytes(reference: AgentImageReference, data: bytes) -> None:
    """Check that bytes read from a store are the image ``reference`` was made from.

    Raises:
        ImageValidationError: ``reference`` breaks ``validate_image_reference``.
        MediaStoreError: The size or SHA-256 differs from the reference, or the
            bytes are not a well-formed image of ``reference.mime_type``.
    """
    validate_image_reference(reference)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise MediaStoreError(
            f"the store returned {type(data).__name__} for image {reference.uri!r}, not bytes",
            uri=reference.uri,
        )
    if len(data) != reference.size_bytes:
        raise MediaStoreError(
            f"image {reference.uri!r} read back as {len(data)} bytes; the reference says "
            f"{reference.size_bytes}",
            uri=reference.uri,
        )
    if hashlib.sha256(data).hexdigest() != reference.sha256:
        raise MediaStoreError(
            f"image {reference.uri!r} read back with a different SHA-256 than its reference",
            uri=reference.uri,
        )
    problem = image_structure_problem(bytes(data), reference.mime_type)
    if problem is not None:
        raise MediaStoreError(
            f"image {reference.uri!r} read back is not a well-formed {reference.mime_type}: "
            f"the image {problem}",
            uri=reference.uri,
        )
