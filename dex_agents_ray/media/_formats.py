"""Cheap structural checks that tell PNG, JPEG, GIF and WebP bytes apart.

These are not decoders. Each check reads a few header bytes (and, for JPEG,
the last two), so a caller can refuse bytes that are clearly not the image they
claim to be before storing or sending them:

- PNG: the 8-byte signature, then an ``IHDR`` chunk of length 13 with its CRC.
- JPEG: SOI (``FF D8``), then a marker (``FF`` and a marker code), and EOI
  (``FF D9``) at the end.
- GIF: ``GIF87a`` or ``GIF89a`` and the 7-byte logical screen descriptor.
- WebP: ``RIFF``, a size that matches the data, ``WEBP``, then a ``VP8 ``,
  ``VP8L`` or ``VP8X`` chunk that fits in the data.
"""

from __future__ import annotations

from ._errors import ImageValidationError
from ._reference import ImageMimeType

__all__ = ["check_image_structure", "detect_image_mime_type", "image_structure_problem"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_GIF_SIGNATURES = (b"GIF87a", b"GIF89a")
_WEBP_CHUNKS = (b"VP8 ", b"VP8L", b"VP8X")


def _sniff(data: bytes) -> ImageMimeType | None:
    """The type the leading magic bytes claim, before any structural check."""
    if data.startswith(_PNG_SIGNATURE):
        return ImageMimeType.PNG
    if data.startswith(b"\xff\xd8"):
        return ImageMimeType.JPEG
    if data[:6] in _GIF_SIGNATURES:
        return ImageMimeType.GIF
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return ImageMimeType.WEBP
    return None


def _png_problem(data: bytes) -> str | None:
    if not data.startswith(_PNG_SIGNATURE):
        return "does not start with the PNG signature"
    # Signature (8) + IHDR length (4) + type (4) + data (13) + CRC (4).
    if len(data) < 33:
        return f"is {len(data)} bytes, too short for a PNG IHDR chunk (33 bytes)"
    if int.from_bytes(data[8:12], "big") != 13 or data[12:16] != b"IHDR":
        return "has no IHDR chunk of length 13 right after the PNG signature"
    return None


def _jpeg_problem(data: bytes) -> str | None:
    if not data.startswith(b"\xff\xd8"):
        return "does not start with the JPEG SOI marker FF D8"
    if len(data) < 6:
        return f"is {len(data)} bytes, too short for JPEG SOI, a marker and EOI (6 bytes)"
    # Marker codes are C0..FE; a second SOI or an EOI cannot follow SOI.
    if data[2] != 0xFF or not 0xC0 <= data[3] <= 0xFE or data[3] in (0xD8, 0xD9):
        return "has no JPEG marker right after SOI"
    if not data.endswith(b"\xff\xd9"):
        return "does not end with the JPEG EOI marker FF D9"
    return None


def _gif_problem(data: bytes) -> str | None:
    if data[:6] not in _GIF_SIGNATURES:
        return "does not start with GIF87a or GIF89a"
    if len(data) < 13:
        return f"is {len(data)} bytes, too short for a GIF header and screen descriptor (13 bytes)"
    return None


def _webp_problem(data: bytes) -> str | None:
    if not data.startswith(b"RIFF") or data[8:12] != b"WEBP":
        return "does not start with a RIFF header of form WEBP"
    # RIFF header (12) + chunk type (4) + chunk size (4).
    if len(data) < 20:
        return f"is {len(data)} bytes, too short for a WebP header and first chunk (20 bytes)"
    riff_size = int.from_bytes(data[4:8], "little")
    if riff_size + 8 != len(data):
        return f"has RIFF size {riff_size}, but the data after the size field is {len(data) - 8}"
    if data[12:16] not in _WEBP_CHUNKS:
        return "has no VP8, VP8L or VP8X chunk after the WEBP header"
    chunk_size = int.from_bytes(data[16:20], "little")
    if 20 + chunk_size > len(data):
        chunk = data[12:16].decode("ascii").strip()
        return f"has a {chunk} chunk of {chunk_size} bytes that runs past the data"
    return None


_PROBLEMS = {
    ImageMimeType.PNG: _png_problem,
    ImageMimeType.JPEG: _jpeg_problem,
    ImageMimeType.GIF: _gif_problem,
    ImageMimeType.WEBP: _webp_problem,
}


def image_structure_problem(data: bytes, mime_type: str) -> str | None:
    """Why ``data`` is not a well-formed image of ``mime_type``, or ``None`` when it is.

    The text completes a sentence that starts with "the image": for example
    ``"does not end with the JPEG EOI marker FF D9"``.
    """
    try:
        kind = ImageMimeType(mime_type)
    except ValueError:
        return f"has unsupported type {mime_type!r}"
    return _PROBLEMS[kind](data)


def detect_image_mime_type(data: bytes) -> ImageMimeType | None:
    """The type of well-formed PNG, JPEG, GIF or WebP bytes; ``None`` for anything else."""
    kind = _sniff(data)
    if kind is None or _PROBLEMS[kind](data) is not None:
        return None
    return kind


def check_image_structure(data: bytes) -> ImageMimeType:
    """Detect the type of ``data`` and refuse bytes that fail its structural check.

    Raises:
        ImageValidationError: ``data`` is not a well-formed PNG, JPEG, GIF or
            WebP image; the message says which check failed (``field="data"``).
    """
    kind = _sniff(data)
    if kind is None:
        raise ImageValidationError(
            "the image is not PNG, JPEG, GIF or WebP: its first bytes match none of their "
            "signatures",
            field="data",
        )
    problem = _PROBLEMS[kind](data)
    if problem is not None:
        raise ImageValidationError(f"the {kind.name} image {problem}", field="data")
    return kind
