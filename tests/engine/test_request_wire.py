"""A remote attempt's request carries the Attributes as stored bytes, unparsed."""

from __future__ import annotations

import pytest
from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine._state import RunState


def _state() -> RunState:
    state = RunState()
    values = {
        "plain": pb.Value(string_value="v"),
        "empty": pb.Value(),
        "long": pb.Value(string_value="x" * 200),  # a two-byte length
        "longer": pb.Value(obj_value=pb.EncodedObject(encoding="json", payload=b"y" * 20_000)),
        "clé-ü": pb.Value(int_value=-5),  # a key that is not ASCII
        "tools/c1": pb.Value(string_value="map entry"),
        "tools/c2": pb.Value(string_value="another"),
        "other/k": pb.Value(bool_value=True),
    }
    state.attributes = {key: value.SerializeToString() for key, value in values.items()}
    return state


@pytest.mark.parametrize(
    "loaded", [(), ("tools/",), ("tools/c2",), ("tools/", "other/k")], ids=repr
)
@pytest.mark.parametrize(
    "kind", [pb.InvokeExecuteMethodRequest, pb.InvokeWaitForMethodRequest], ids=lambda k: k.__name__
)
def test_appended_attribute_bytes_parse_as_the_attributes_field(
    kind: type[pb.InvokeExecuteMethodRequest] | type[pb.InvokeWaitForMethodRequest],
    loaded: tuple[str, ...],
) -> None:
    state = _state()
    base = kind(flow_type="T", step_type="S", loaded_attribute_map_instances=loaded)
    expected = kind()
    expected.CopyFrom(base)
    expected.attributes.extend(state.attribute_kvs(loaded))

    parsed = kind.FromString(base.SerializeToString() + state.attributes_wire(loaded))

    assert parsed == expected
    assert [kv.key for kv in parsed.attributes] == list(state.attribute_snapshot(loaded))


def test_no_attributes_append_nothing() -> None:
    assert RunState().attributes_wire(()) == b""
