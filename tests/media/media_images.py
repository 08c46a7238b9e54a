"""Small well-formed images of every supported type, built from bytes."""

from __future__ import annotations

import random
import struct
import zlib


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png(width: int = 2, height: int = 2, *, seed: int = 0, padding: int = 0) -> bytes:
    """A real PNG (8-bit grey); ``padding`` seeded random bytes in a private chunk make it
    bigger."""
    rows = b"".join(
        b"\x00" + bytes((seed + x + y) % 256 for x in range(width)) for y in range(height)
    )
    chunks = [
        _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)),
        _png_chunk(b"IDAT", zlib.compress(rows)),
    ]
    if padding:
        chunks.append(_png_chunk(b"prVt", random.Random(seed).randbytes(padding)))
    chunks.append(_png_chunk(b"IEND", b""))
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


def jpeg(*, padding: int = 16, seed: int = 0) -> bytes:
    """SOI, an APP0 JFIF segment, a comment segment and EOI."""
    app0 = b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    comment = bytes((seed + i) % 251 for i in range(padding))
    return (
        b"\xff\xd8"
        + b"\xff\xe0"
        + struct.pack(">H", len(app0) + 2)
        + app0
        + b"\xff\xfe"
        + struct.pack(">H", len(comment) + 2)
        + comment
        + b"\xff\xd9"
    )


def gif(*, seed: int = 0) -> bytes:
    """A 1x1 GIF89a."""
    return (
        b"GIF89a"
        + struct.pack("<HHBBB", 1, 1, 0x80, 0, 0)
        + bytes((seed % 256, 0, 0, 255, 255, 255))
        + b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
    )


def webp(chunk: bytes = b"VP8L", *, payload: bytes = b"\x2f\x00\x00\x00\x00") -> bytes:
    """A RIFF WEBP file with one chunk (padded to an even size)."""
    body = chunk + struct.pack("<I", len(payload)) + payload
    if len(payload) % 2:
        body += b"\x00"
    riff = b"WEBP" + body
    return b"RIFF" + struct.pack("<I", len(riff)) + riff
