"""References, their checks, and the helpers runners use, on the in-memory store."""

from __future__ import annotations

import asyncio
import pickle
from dataclasses import dataclass, replace
from typing import Any

import pytest
from media_images import gif, jpeg, png, webp

from dex_agents_ray.media import (
    MAX_IMAGE_URI_LENGTH,
    MAX_IMAGES_PER_MESSAGE,
    AgentImageReference,
    DurableMediaStore,
    ImageValidationError,
    InMemoryMediaStore,
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

STORE = "memory://media"


def _reference(**changes: Any) -> AgentImageReference:
    return replace(build_image_reference(png(), STORE), **changes)


def test_the_wire_form_round_trips_in_the_spec_order() -> None:
    reference = build_image_reference(png(), STORE)
    wire = reference.to_dict()
    assert list(wire) == ["type", "uri", "mime_type", "sha256", "size_bytes"]
    assert wire["type"] == "image"
    assert wire["uri"] == f"{STORE}/sha256/{reference.sha256}"
    assert AgentImageReference.from_dict(wire) == reference


@pytest.mark.parametrize(
    ("wire_change", "field"),
    [
        ({"type": "file"}, "type"),
        ({"extra": 1}, "extra"),
        ({"sha256": "A" * 64}, "sha256"),
        ({"size_bytes": "12"}, "size_bytes"),
    ],
)
def test_from_dict_refuses_bad_wire_forms(wire_change: dict[str, Any], field: str) -> None:
    wire = {**build_image_reference(png(), STORE).to_dict(), **wire_change}
    with pytest.raises(ImageValidationError) as caught:
        AgentImageReference.from_dict(wire)
    assert caught.value.field == field
    missing = build_image_reference(png(), STORE).to_dict()
    del missing["uri"]
    with pytest.raises(ImageValidationError, match="lacks keys: uri"):
        AgentImageReference.from_dict(missing)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"sha256": "ab" * 31}, "sha256", "64 lowercase hexadecimal digits"),
        ({"sha256": "../" * 21 + "x"}, "sha256", "64 lowercase hexadecimal digits"),
        ({"size_bytes": 0}, "size_bytes", "from 1 to MAX_IMAGE_BYTES"),
        ({"size_bytes": 3_750_001}, "size_bytes", "from 1 to MAX_IMAGE_BYTES"),
        ({"size_bytes": True}, "size_bytes", "from 1 to MAX_IMAGE_BYTES"),
        ({"mime_type": "image/svg+xml"}, "mime_type", "must be one of"),
        ({"uri": "memory://media/other/" + "0" * 64}, "uri", "/sha256/<sha256>"),
        ({"uri": "/sha256/" + "0" * 64}, "uri", "/sha256/<sha256>"),
    ],
)
def test_validate_image_reference_names_the_field(
    changes: dict[str, Any], field: str, message: str
) -> None:
    if "uri" in changes:
        changes = {**changes, "sha256": "0" * 64}
    with pytest.raises(ImageValidationError, match=message) as caught:
        validate_image_reference(_reference(**changes))
    assert caught.value.field == field


def test_uri_length_is_counted_in_utf8_bytes() -> None:
    sha256 = "1" * 64
    suffix = f"/sha256/{sha256}"
    fits = "memory://" + "é" * ((MAX_IMAGE_URI_LENGTH - len(suffix) - 9) // 2)
    validate_image_reference(_reference(sha256=sha256, uri=fits + suffix))
    too_long = fits + "éé"
    with pytest.raises(ImageValidationError, match=r"bytes as UTF-8; the limit is") as caught:
        validate_image_reference(_reference(sha256=sha256, uri=too_long + suffix))
    assert caught.value.field == "uri"
    with pytest.raises(ValueError, match="MAX_IMAGE_URI_LENGTH"):
        require_short_image_uris(too_long)
    require_short_image_uris(fits)
    for bad in ("", "memory://media/"):
        with pytest.raises(ValueError):
            require_short_image_uris(bad)


def test_validate_image_references_counts_and_indexes() -> None:
    good = build_image_reference(png(), STORE)
    validate_image_references([good] * MAX_IMAGES_PER_MESSAGE)
    validate_image_references(())
    with pytest.raises(ImageValidationError, match=r"at most MAX_IMAGES_PER_MESSAGE \(20\)"):
        validate_image_references([good] * (MAX_IMAGES_PER_MESSAGE + 1))
    with pytest.raises(ImageValidationError) as caught:
        validate_image_references([good, replace(good, size_bytes=-1)])
    assert caught.value.field == "images[1].size_bytes"
    with pytest.raises(ImageValidationError) as caught:
        validate_image_references([good, good.to_dict()])  # type: ignore[list-item]
    assert caught.value.field == "images[1]"
    with pytest.raises(ImageValidationError, match="must be a list"):
        validate_image_references(good)  # type: ignore[arg-type]


def test_require_store_image_reference_accepts_only_its_own_uris() -> None:
    reference = build_image_reference(gif(), STORE)
    assert require_store_image_reference(reference, STORE) == reference.sha256
    for other in ("memory://other", "memory://media/sub", "memory://medi"):
        with pytest.raises(MediaStoreError, match="is not in the media store") as caught:
            require_store_image_reference(reference, other)
        assert caught.value.uri == reference.uri


def test_verify_image_bytes_checks_size_sha256_and_format() -> None:
    data = jpeg(padding=40)
    reference = build_image_reference(data, STORE)
    verify_image_bytes(reference, data)
    with pytest.raises(MediaStoreError, match="41 bytes|read back as"):
        verify_image_bytes(reference, data + b"x")
    flipped = bytearray(data)
    flipped[10] ^= 1
    with pytest.raises(MediaStoreError, match="different SHA-256"):
        verify_image_bytes(reference, bytes(flipped))
    # Right size and hash, wrong declared type.
    with pytest.raises(MediaStoreError, match="not a well-formed image/png"):
        verify_image_bytes(replace(reference, mime_type="image/png"), data)


def test_errors_keep_their_fields_across_pickling() -> None:
    error = pickle.loads(pickle.dumps(ImageValidationError("bad", field="images[2].uri")))
    assert (str(error), error.field) == ("bad", "images[2].uri")
    failure = pickle.loads(pickle.dumps(MediaStoreError("gone", uri="s3://b/x")))
    assert (str(failure), failure.uri) == ("gone", "s3://b/x")


async def test_in_memory_store_round_trips_and_forgets() -> None:
    store = InMemoryMediaStore()
    assert isinstance(store, MediaStore) and isinstance(store, DurableMediaStore)
    reference = await store.put_image(webp())
    assert await store.put_image(webp()) == reference
    assert await store.get_image(reference) == webp()
    snapshot = pickle.loads(pickle.dumps(store))
    assert store.delete_image(reference) is True
    with pytest.raises(MediaStoreError, match="not found"):
        await store.get_image(reference)
    assert await snapshot.get_image(reference) == webp()
    with pytest.raises(MediaStoreError, match="not in the media store"):
        await InMemoryMediaStore("memory://other").get_image(reference)


@dataclass(frozen=True, kw_only=True)
class _Message:
    images: tuple[AgentImageReference, ...] = ()


@dataclass(frozen=True, kw_only=True)
class _Turn:
    messages: tuple[_Message, ...]
    tool_calls: dict[str, _Message]


def test_collect_turn_images_keeps_order_and_each_sha256_once() -> None:
    a, b, c = (build_image_reference(image, STORE) for image in (png(), gif(), jpeg()))
    turn = _Turn(
        messages=(_Message(images=(a,)), _Message(), _Message(images=(b, a))),
        tool_calls={"call-2": _Message(images=(c,)), "call-1": _Message(images=(b,))},
    )
    assert collect_turn_images(turn) == [a, b, c]
    assert collect_turn_images(_Turn(messages=(), tool_calls={})) == []


class _SlowStore(InMemoryMediaStore):
    """Reads of one image fail; the others wait until cancelled."""

    def __init__(self, failing_sha256: str) -> None:
        super().__init__()
        self.failing = failing_sha256
        self.cancelled = 0
        self.started = 0

    async def get_image(self, reference: AgentImageReference) -> bytes:
        self.started += 1
        if reference.sha256 == self.failing:
            raise MediaStoreError("broken", uri=reference.uri)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


async def test_load_images_reads_each_sha256_once_and_fails_fast() -> None:
    store = InMemoryMediaStore()
    references = [await store.put_image(image) for image in (png(), gif(), png(), webp())]
    loaded = await load_images(store, references)
    assert list(loaded) == [references[0].sha256, references[1].sha256, references[3].sha256]
    assert loaded[references[3].sha256] == webp()
    assert await load_images(store, []) == {}

    slow = _SlowStore(references[1].sha256)
    with pytest.raises(MediaStoreError, match="broken"):
        await load_images(slow, references)
    assert (slow.started, slow.cancelled) == (3, 2)

    with pytest.raises(ImageValidationError):
        await load_images(store, [replace(references[0], sha256="x")])
    store.delete_image(references[1])
    with pytest.raises(MediaStoreError, match="not found"):
        await load_images(store, references)
