"""A ``CodecRegistry`` that resolves each type hint once.

The SDK's automatic JSON codec calls ``typing.get_type_hints`` for every
dataclass on every decode, and ``CodecRegistry.resolve`` builds a new codec on
every call; on a session's hot path (a message window decoded in every model
Step) that was a tenth of a host's time. This registry keeps the SDK's wire
format and rules — the encoder and the decoder follow ``dex.codec``'s rules for
dataclasses, datetimes, enums, lists, tuples and mappings — but caches the
resolved codecs and each dataclass's field hints, and encodes in one pass (the
SDK's encoder deep-copies every value through ``dataclasses.asdict`` first).
``tests/engine/test_codecs.py`` checks it decodes exactly as the SDK does.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import functools
import itertools
import json
import re
import secrets
import threading
import types
import typing
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any
from uuid import UUID

from dex import CodecRegistry, JsonCodec
from dex.codec import Codec, Value, WireKind

from dex_agents_ray.engine.sdk._immutable import mutable_part
from dex_agents_ray.engine.sdk._sdk import supports_automatic_json as _supports_automatic_json
from dex_agents_ray.engine.sdk._sdk import type_name as _type_name

Decoder = Callable[[Any], Any]


class CachingCodecRegistry(CodecRegistry):
    """``CodecRegistry`` whose resolutions (and dataclass decoders) are cached.

    Custom codecs of a wrapped registry keep precedence, as in the SDK.
    """

    def __init__(self, base: CodecRegistry | None = None) -> None:
        super().__init__()
        self._base = base or CodecRegistry()
        self._resolved: dict[object, Codec[Any]] = {}

    def resolve(self, type_hint: object) -> Codec[Any]:
        try:
            return self._resolved[type_hint]
        except (KeyError, TypeError):
            pass
        codec = self._base.resolve(type_hint)
        try:
            custom = type_hint in self._base._codecs
        except TypeError:
            custom = True  # an unhashable hint: keep what the SDK resolved
        if not custom and isinstance(codec, JsonCodec) and _supports_automatic_json(type_hint):
            try:
                decoder = _decoder(type_hint)
            except TypeError:  # an unhashable hint: keep the SDK's codec
                decoder = None
            if decoder is not None:
                kind = _SharedDecodingJsonCodec if type_hint in _SHARED else _EngineJsonCodec
                codec = kind(_type_name(type_hint), decoder, _encode, type_hint)
        try:
            self._resolved[type_hint] = codec
        except TypeError:  # an unhashable hint: resolve it every time
            pass
        return codec


_SHARED: set[object] = set()
_SHARED_CACHE_BYTES = 32 * 1024 * 1024
"""The most JSON text (in characters) whose decoded values a process keeps."""
_SHARED_MAX_PAYLOAD = 256 * 1024
"""Larger payloads are decoded every time."""


def share_decoded_values(*classes: type[Any]) -> None:
    """Let every process decode each stored JSON text of ``classes`` once.

    Decoding returns the same object for the same JSON text (an LRU of
    ``_SHARED_CACHE_BYTES``), which is only sound for values nobody can change:
    each class must be a frozen dataclass whose fields hold only such values,
    strings, numbers, booleans, ``None``, enums, datetimes and tuples of them.
    Call it at import time, before a registry resolves the class.

    Raises:
        TypeError: A class (or a field's type) can be changed in place.
    """
    for cls in classes:
        problem = mutable_part(cls)
        if problem is not None:
            raise TypeError(problem)
    _SHARED.update(classes)


class _EngineJsonCodec(JsonCodec[Any]):
    """The SDK's ``JsonCodec`` whose type check also takes ``Any`` and unions.

    The SDK's check refuses every value for ``Any`` (``Attribute("s",
    dict[str, Any])`` could store nothing); here ``Any`` takes any value the JSON
    encoder takes, and a union the values of its members.
    """

    def encode(self, value: Any) -> Value:
        if self.expected_type is not None and not _matches(value, self.expected_type):
            raise TypeError(
                f"{self.type_name} requires {_type_name(self.expected_type)}, "
                f"got {type(value).__name__}"
            )
        if not _shared_texts:
            return Value(WireKind.JSON, _dumps(self.encoder(value)))
        splice = _Splice()
        token = _splicing.set(splice)
        try:
            data = self.encoder(value)
        finally:
            _splicing.reset(token)
        return Value(WireKind.JSON, splice.apply(_dumps(data)))


_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"), sort_keys=True)
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
# ``json.dumps`` with these options builds a new encoder on every call; this one is
# built once. Circular references need no check: ``_encode`` built ``data`` as a
# tree (it would have recursed forever on a cycle first).
_dump_chunks: Callable[[Any, int], Any] | None = (
    None
    if _c_encoder is None
    else _c_encoder(
        None,
        _JSON.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        True,
        False,
        False,
    )
)


def _dumps(data: Any) -> str:
    """``json.dumps(data, allow_nan=False, separators=(",", ":"), sort_keys=True)``.

    ``orjson`` writes the same text several times faster for what ``_encode``
    makes of most values; whatever it would write differently goes to the
    standard library's encoder, which also raises as ``json.dumps`` does: text
    that is not ASCII or holds DEL (``json`` escapes both), an object ``orjson``
    would not take as it is (dates, subclasses, dataclasses, integers past 64
    bits, keys that are not strings, lone surrogates) and floats it formats
    otherwise (``_encode`` hands those over as ``_StdFloat``).
    """
    if isinstance(data, str):
        return _JSON.encode(data)
    if _orjson_dumps is not None:
        try:
            text: str = _orjson_dumps(data, option=_ORJSON_OPTIONS).decode()
        except TypeError:
            pass
        else:
            if text.isascii() and "\x7f" not in text:
                return text
    if _dump_chunks is None:
        return _JSON.encode(data)
    return "".join(_dump_chunks(data, 0))


try:
    import orjson

    _orjson_dumps: Callable[..., bytes] | None = orjson.dumps
    _ORJSON_OPTIONS = (
        orjson.OPT_SORT_KEYS
        | orjson.OPT_PASSTHROUGH_DATETIME
        | orjson.OPT_PASSTHROUGH_DATACLASS
        | orjson.OPT_PASSTHROUGH_SUBCLASS
    )
except ImportError:  # pragma: no cover - a declared dependency
    _orjson_dumps = None
    _ORJSON_OPTIONS = 0


class _StdFloat(float):
    """A float outside ``1e-4 <= abs(x) < 1e16`` (where ``orjson``'s exponents can
    differ from ``repr``'s), NaN or an infinity (``orjson`` writes ``null``,
    ``json`` refuses): ``orjson`` refuses the subclass, so ``json`` writes it."""


def _float(value: float) -> float:
    if value == 0.0 or 1e-4 <= abs(value) < 1e16:
        return value
    return _StdFloat(value)


class _Splice:
    """The JSON texts of shared values one encode found kept (see ``_encode``).

    Each stands in the encoded data as a placeholder string with a tag of this
    encode (the process's random prefix and a number), replaced by its text
    after ``json.dumps``: the same JSON, as the encoding of a value nests its
    parts' encodings unchanged (sorted keys, the same separators), without
    walking and dumping those parts again.
    """

    def __init__(self) -> None:
        self.tag = ""
        self.texts: list[str] = []

    def placeholder(self, text: str) -> str:
        if not self.tag:  # this process's random prefix and a number of its own
            self.tag = f"{_TAG_PREFIX}{next(_tags) & 0xFFFFFFFF:08x}"
        self.texts.append(text)
        return f"\x00dex:{self.tag}:{len(self.texts) - 1}\x00"

    def apply(self, payload: str) -> str:
        if not self.texts:
            return payload
        texts, tag, spliced = self.texts, self.tag, 0

        def text(match: re.Match[str]) -> str:
            nonlocal spliced
            if match.group(1) != tag:
                return match.group(0)  # a string that only looks like one
            spliced += 1
            return texts[int(match.group(2))]

        result = _PLACEHOLDER.sub(text, payload)
        if spliced != len(texts):  # cannot happen: every placeholder was dumped once
            raise RuntimeError(f"spliced {spliced} of {len(texts)} kept JSON texts")
        return result


_TAG_PREFIX = secrets.token_hex(4)
_tags = itertools.count()
_PLACEHOLDER = re.compile(r'"\\u0000dex:([0-9a-f]{16}):(\d+)\\u0000"')


_splicing: contextvars.ContextVar[_Splice | None] = contextvars.ContextVar(
    "dex_agents_ray_splicing", default=None
)


def _matches(value: object, hint: object) -> bool:
    """``dex.codec._matches_type``, with ``Any`` and unions."""
    if hint is Any or type(value) is hint:  # the second: most encodes, a plain class
        return True
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_matches(item, arguments[0]) for item in value)
    if origin is tuple:
        return isinstance(value, tuple) and all(_matches(item, arguments[0]) for item in value)
    if origin in (dict, Mapping):
        return isinstance(value, Mapping) and all(
            _matches(key, arguments[0]) and _matches(item, arguments[1])
            for key, item in value.items()
        )
    if origin is typing.Union or origin is types.UnionType:
        return any(_matches(value, argument) for argument in arguments)
    return isinstance(hint, type) and type(value) is hint


class _SharedDecodingJsonCodec(_EngineJsonCodec):
    """A ``JsonCodec`` that hands out one decoded value per JSON text.

    Encoding a value of exactly the class also keeps it for its text: the next
    Step in this process that reads what an earlier one wrote gets that object
    without parsing it (the shared classes rebuild their declared field types on
    construction, so the value is what decoding its text would give)."""

    def encode(self, value: Any) -> Value:
        encoded = super().encode(value)
        data = encoded.data
        if type(value) is self.expected_type and isinstance(data, str):
            if len(data) <= _SHARED_MAX_PAYLOAD:
                _keep((self.expected_type, data), value)
        return encoded

    def decode(self, value: Value) -> Any:
        data = value.data
        if not isinstance(data, str) or len(data) > _SHARED_MAX_PAYLOAD:
            return super().decode(value)
        key = (self.expected_type, data)
        with _shared_lock:
            hit = _shared_values.get(key)
            if hit is not None:
                _shared_values.move_to_end(key)
                return hit
        decoded = super().decode(value)
        _keep(key, decoded)
        return decoded


def _keep(key: tuple[object, str], value: Any) -> None:
    global _shared_chars
    with _shared_lock:
        if key in _shared_values:
            _shared_values.move_to_end(key)
            return
        _shared_values[key] = value
        _shared_texts[id(value)] = key[1]
        _shared_chars += len(key[1])
        while _shared_chars > _SHARED_CACHE_BYTES:
            (_, old), evicted = _shared_values.popitem(last=False)
            if _shared_texts.get(id(evicted)) is old:
                del _shared_texts[id(evicted)]
            _shared_chars -= len(old)


_shared_lock = threading.Lock()
_shared_values: OrderedDict[tuple[object, str], Any] = OrderedDict()
_shared_texts: dict[int, str] = {}
"""The JSON text of each value in ``_shared_values``, by the value's ``id`` (the
cache holds the value, so its ``id`` is not reused while the entry exists)."""
_shared_chars = 0


@functools.lru_cache(maxsize=4096)
def _decoder(type_hint: object) -> Decoder:
    """A decoder for ``type_hint`` following ``dex.codec._decode_json_value``."""
    origin = typing.get_origin(type_hint)
    arguments = typing.get_args(type_hint)
    if isinstance(type_hint, type) and dataclasses.is_dataclass(type_hint):
        return _dataclass_decoder(type_hint)
    if type_hint is datetime:
        return _decode_datetime
    if isinstance(type_hint, type) and issubclass(type_hint, Enum):
        return type_hint
    # Item decoders are looked up at decode time (a cache hit), so recursive
    # types resolve lazily, as the SDK's decoder does.
    if origin is list:
        return lambda value: [_decoder(arguments[0])(v) for v in value]
    if origin is tuple:
        return lambda value: tuple(_decoder(arguments[0])(v) for v in value)
    if origin in (dict, Mapping):
        key_hint, item_hint = arguments
        return lambda value: {
            _decoder(key_hint)(k): _decoder(item_hint)(v) for k, v in value.items()
        }
    if type_hint in (str, bool, int, float):
        return functools.partial(_exact, type_hint)
    return _identity


def _dataclass_decoder(cls: type[Any]) -> Decoder:
    name = _type_name(cls)
    plan: list[tuple[str, Decoder | None]] = []

    def decode(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"{name} requires a JSON object")
        if not plan:
            # Each field's decoder, found once (``None``: the JSON value as it is).
            # A nested dataclass's decoder plans its own fields when first used.
            hints = typing.get_type_hints(cls)
            found = [(f.name, _decoder(hints[f.name])) for f in dataclasses.fields(cls)]
            plan[:] = [(field, None if d is _identity else d) for field, d in found]
        return cls(
            **{
                field: value[field] if decoder is None else decoder(value[field])
                for field, decoder in plan
            }
        )

    return decode


def _encode(value: Any) -> Any:
    """JSON-ready data for ``value``, equal to ``dex.codec._encode_json_value``'s
    (which converts with ``dataclasses.asdict`` and then walks the copy)."""
    kind = type(value)
    if kind in _SCALARS:  # most values: checked before the costlier tests below
        return value
    if kind is float:
        return _float(value)
    if kind is list or kind is tuple:
        return [_encode(item) for item in value]
    if kind is dict:
        return {key: _encode(item) for key, item in value.items()}
    shape = _shapes.get(kind) or _shape(kind)
    if shape is _Shape.DATACLASS:
        if kind in _SHARED:
            splice = _splicing.get()
            text = None if splice is None else _shared_texts.get(id(value))
            if text is not None and splice is not None:
                return splice.placeholder(text)  # its kept text, spliced after dumps
        data = {}
        names = _field_names.get(kind)
        if names is None:  # a class past the caches' bound
            names = tuple(f.name for f in dataclasses.fields(value))
        for name in names:
            item = getattr(value, name)
            data[name] = item if type(item) in _SCALARS else _encode(item)
        return data
    if shape is _Shape.DATETIME:
        return value.isoformat()
    if shape is _Shape.ENUM:
        return value.value
    if shape is _Shape.MAPPING:
        return {key: _encode(item) for key, item in value.items()}
    if shape is _Shape.SEQUENCE:
        return [_encode(item) for item in value]
    if isinstance(value, UUID):
        # ``json.dumps`` refuses it; ``orjson`` would write it as a string.
        raise TypeError(f"Object of type {kind.__name__} is not JSON serializable")
    return value


class _Shape(enum.Enum):
    DATACLASS = 1
    DATETIME = 2
    ENUM = 3
    MAPPING = 4
    SEQUENCE = 5
    OTHER = 6


_shapes: dict[type[Any], _Shape] = {}


def _shape(kind: type[Any]) -> _Shape:
    """How ``_encode`` converts an instance of ``kind``, in its order of tests (found
    once per class: ``dataclasses.is_dataclass`` of an enum member, for one, costs a
    failed attribute lookup through ``EnumType.__getattr__`` on every call)."""
    if dataclasses.is_dataclass(kind):
        shape = _Shape.DATACLASS
    elif issubclass(kind, datetime):
        shape = _Shape.DATETIME
    elif issubclass(kind, Enum):
        shape = _Shape.ENUM
    elif issubclass(kind, Mapping):
        shape = _Shape.MAPPING
    elif issubclass(kind, (list, tuple)):
        shape = _Shape.SEQUENCE
    else:
        shape = _Shape.OTHER
    if len(_shapes) < 4096:  # classes made at run time must not grow it without end
        if shape is _Shape.DATACLASS:
            _field_names[kind] = tuple(f.name for f in dataclasses.fields(kind))
        _shapes[kind] = shape
    return shape


_field_names: dict[type[Any], tuple[str, ...]] = {}
"""The field names of each dataclass ``_shape`` found (set with its shape)."""


_SCALARS = frozenset({str, int, bool, type(None)})
"""Types ``_encode`` returns as they are (floats go through ``_float``)."""


def _decode_datetime(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError("datetime requires a JSON string")
    return datetime.fromisoformat(value)


def _exact(expected: type[Any], value: Any) -> Any:
    if type(value) is not expected:
        raise TypeError(f"expected {_type_name(expected)}")
    return value


def _identity(value: Any) -> Any:
    return value


__all__: Sequence[str] = ["CachingCodecRegistry", "share_decoded_values"]
