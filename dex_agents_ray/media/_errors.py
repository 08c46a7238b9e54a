"""Errors of the media layer.

The tree (both also :class:`dex_agents_ray.errors.DexAgentsError`)::

    ValueError
    └── ImageValidationError   bad image bytes or a bad reference (misuse; nothing changed)
    RuntimeError
    └── MediaStoreError        a store could not write or read an image, or read
                               bytes that are not the referenced image

A store's constructor refuses a location that would make URIs longer than
``MAX_IMAGE_URI_LENGTH`` with a plain ``ValueError``.
"""

from __future__ import annotations

from dex_agents_ray.errors import DexAgentsError

__all__ = ["ImageValidationError", "MediaStoreError"]


class ImageValidationError(DexAgentsError, ValueError):
    """Bytes that are not a supported image, or a reference that breaks a rule.

    Raised before anything is written or sent, so the failed call changed nothing.

    Attributes:
        field: What was refused: ``"data"`` for image bytes, ``"images"`` for a
            list of references, or a reference field such as ``"size_bytes"``
            (prefixed with ``images[<n>].`` inside a list). ``None`` when the
            error is about no single field.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self) -> tuple[object, ...]:
        # Keep ``field`` when the error crosses a Ray or process boundary.
        return (_rebuild_image_validation_error, (str(self), self.field))


class MediaStoreError(DexAgentsError, RuntimeError):
    """A media store could not write or read an image.

    Also raised when a store returned bytes that are not the referenced image
    (size, SHA-256 or format differ), when a reference is not under the store's
    own location, and when a local directory holds a symbolic link, a special
    file or a multiply-linked file where an image should be.

    Attributes:
        uri: The image URI (or the store URI) the failure is about; ``None``
            when the failure is about no single image.
    """

    def __init__(self, message: str, *, uri: str | None = None) -> None:
        super().__init__(message)
        self.uri = uri

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_media_store_error, (str(self), self.uri))


def _rebuild_image_validation_error(message: str, field: str | None) -> ImageValidationError:
    return ImageValidationError(message, field=field)


def _rebuild_media_store_error(message: str, uri: str | None) -> MediaStoreError:
    return MediaStoreError(message, uri=uri)
