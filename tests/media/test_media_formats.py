"""The structural checks: every supported type accepted, malformed ones refused clearly."""

from __future__ import annotations

import struct

import pytest
from media_images import gif, jpeg, png, webp

from dex_agents_ray.media import (
    MAX_IMAGE_BYTES,
    ImageMimeType,
    ImageValidationError,
    build_image_reference,
    detect_image_mime_type,
)

STORE = "memory://formats"


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (png(), ImageMimeType.PNG),
        (png(64, 32, padding=1000), ImageMimeType.PNG),
        (jpeg(), ImageMimeType.JPEG),
        (b"\xff\xd8\xff\xdb\xff\xd9", ImageMimeType.JPEG),
        (gif(), ImageMimeType.GIF),
        (b"GIF87a" + bytes(7), ImageMimeType.GIF),
        (webp(b"VP8L"), ImageMimeType.WEBP),
        (webp(b"VP8 ", payload=bytes(10)), ImageMimeType.WEBP),
        (webp(b"VP8X", payload=bytes(10)), ImageMimeType.WEBP),
    ],
)
def test_well_formed_images_are_detected(data: bytes, kind: ImageMimeType) -> None:
    assert detect_image_mime_type(data) is kind
    reference = build_image_reference(data, STORE)
    assert reference.mime_type == kind.value
    assert reference.size_bytes == len(data)
    assert build_image_reference(memoryview(data), STORE) == reference


def _png_with_first_chunk(kind: bytes, length: int) -> bytes:
    return png()[:8] + struct.pack(">I", length) + kind + png()[16:]


_GOOD_WEBP = webp()
_MALFORMED = [
    # PNG
    (png()[:32], "PNG image is 32 bytes, too short for a PNG IHDR chunk"),
    (_png_with_first_chunk(b"IDAT", 13), "no IHDR chunk"),
    (_png_with_first_chunk(b"IHDR", 12), "no IHDR chunk"),
    # JPEG
    (b"\xff\xd8\xff\xd9", "too short for JPEG SOI"),
    (b"\xff\xd8\x00\xe0\x00\x00\xff\xd9", "no JPEG marker right after SOI"),
    (b"\xff\xd8\xff\xd9\x00\x00\xff\xd9", "no JPEG marker right after SOI"),
    (jpeg()[:-2], "does not end with the JPEG EOI marker FF D9"),
    (jpeg() + b"\x00", "does not end with the JPEG EOI marker FF D9"),
    # GIF
    (b"GIF89a" + bytes(6), "too short for a GIF header and screen descriptor"),
    # WebP
    (_GOOD_WEBP[:19], "too short for a WebP header"),
    (_GOOD_WEBP + b"\x00\x00", "has RIFF size"),
    (_GOOD_WEBP[:4] + struct.pack("<I", 4) + _GOOD_WEBP[8:], "has RIFF size"),
    (_GOOD_WEBP[:12] + b"ALPH" + _GOOD_WEBP[16:], "no VP8, VP8L or VP8X chunk"),
    (_GOOD_WEBP[:16] + struct.pack("<I", 1000) + _GOOD_WEBP[20:], "runs past the data"),
    # Nothing we know
    (b"BM" + bytes(100), "first bytes match none of their signatures"),
    (b"GIF88a" + bytes(20), "first bytes match none of their signatures"),
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "first bytes match none of their signatures"),
]


@pytest.mark.parametrize(("data", "message"), _MALFORMED)
def test_malformed_images_are_refused_with_the_failed_check(data: bytes, message: str) -> None:
    assert detect_image_mime_type(data) is None
    with pytest.raises(ImageValidationError, match=message) as caught:
        build_image_reference(data, STORE)
    assert caught.value.field == "data"


def test_empty_and_oversized_images_are_refused() -> None:
    with pytest.raises(ImageValidationError, match="empty"):
        build_image_reference(b"", STORE)
    oversized = png(padding=MAX_IMAGE_BYTES)
    with pytest.raises(ImageValidationError, match=r"MAX_IMAGE_BYTES \(3,750,000\)"):
        build_image_reference(oversized, STORE)
    largest = png(padding=MAX_IMAGE_BYTES - len(png()) - 12)
    assert len(largest) == MAX_IMAGE_BYTES
    assert build_image_reference(largest, STORE).size_bytes == MAX_IMAGE_BYTES
    with pytest.raises(ImageValidationError, match="must be bytes"):
        build_image_reference("not bytes", STORE)  # type: ignore[arg-type]
