"""natserver.stan.pb, the streaming protocol codec, checked byte for byte against Google's
protobuf library in both directions, and against malformed input (only DecodeError, never
another exception).

The reference messages are built at run time (no protoc) from stan.py's own descriptor, plus
``MsgProto.redeliveryCount`` (7), which stan.go's and the server's protocol.proto have had since
2019 and stan.py's 2018 module lacks."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.stan import pb

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from tests.stan.stan_client import protocol as stan_py  # stan.py's generated module (protobuf 3.20.3)

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402


def _runtime_protocol():
    """stan.go's current schema as protobuf classes built at run time."""
    fdp = descriptor_pb2.FileDescriptorProto.FromString(stan_py.DESCRIPTOR.serialized_pb)
    fdp.name = "natserver_test_stan_protocol.proto"
    for message in fdp.message_type:
        if message.name == "MsgProto":
            message.field.add(name="redeliveryCount", number=7, json_name="redeliveryCount",
                              type=descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
                              label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    file = pool.Add(fdp)
    factory = message_factory.MessageFactory(pool)
    classes = {name: factory.GetPrototype(pool.FindMessageTypeByName(f"{fdp.package}.{name}"))
               for name in (m.name for m in fdp.message_type)}
    return type("protocol", (), {"DESCRIPTOR": pool.FindFileByName(fdp.name), **classes}), file


protocol, _ = _runtime_protocol()

_VALUES = {
    pb.STRING: st.text(max_size=40),
    pb.BYTES: st.binary(max_size=40),
    pb.UINT64: st.integers(0, 2**64 - 1),
    pb.INT64: st.integers(-(2**63), 2**63 - 1),
    pb.UINT32: st.integers(0, 2**32 - 1),
    pb.INT32: st.integers(-(2**31), 2**31 - 1),
    pb.BOOL: st.booleans(),
    pb.ENUM: st.integers(0, 4),
}


def _values(message: type):
    fields = {name: st.one_of(st.just(pb._default(kind)), _VALUES[kind]) for _, name, kind in message.FIELDS}
    return st.fixed_dictionaries(fields)


def _google(message: type, values: dict):
    proto = getattr(protocol, message.__name__)()
    for name, value in values.items():
        setattr(proto, name, value)
    return proto


def test_schema_matches_stan_go():
    """Every message, field number and type of the protocol (stan.py's, plus field 7) is ours,
    and stan.py's own schema is a subset."""
    kinds = {9: pb.STRING, 12: pb.BYTES, 4: pb.UINT64, 3: pb.INT64, 13: pb.UINT32, 5: pb.INT32, 8: pb.BOOL,
             14: pb.ENUM}
    google = protocol.DESCRIPTOR.message_types_by_name
    assert sorted(google) == sorted(m.__name__ for m in pb.MESSAGES)
    for message in pb.MESSAGES:
        expected = sorted((f.number, f.name, kinds[f.type]) for f in google[message.__name__].fields)
        assert list(message.FIELDS) == expected
    for message in pb.MESSAGES:
        old = {f.number for f in stan_py.DESCRIPTOR.message_types_by_name[message.__name__].fields}
        assert old <= {number for number, _, _ in message.FIELDS}
    start = protocol.DESCRIPTOR.enum_types_by_name["StartPosition"]
    assert [(v.name, v.number) for v in start.values] == [
        ("NewOnly", pb.NEW_ONLY), ("LastReceived", pb.LAST_RECEIVED), ("TimeDeltaStart", pb.TIME_DELTA_START),
        ("SequenceStart", pb.SEQUENCE_START), ("First", pb.FIRST)]


@pytest.mark.parametrize("message", pb.MESSAGES, ids=lambda m: m.__name__)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_byte_identical_both_ways(message, data):
    values = data.draw(_values(message))
    ours = message(**values)
    theirs = _google(message, values)
    encoded = ours.encode()
    assert encoded == theirs.SerializeToString()
    assert message.decode(encoded) == ours
    parsed = getattr(protocol, message.__name__)()
    parsed.ParseFromString(encoded)
    assert parsed == theirs


@pytest.mark.parametrize("message", pb.MESSAGES, ids=lambda m: m.__name__)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_decodes_what_protobuf_accepts_with_unknown_fields_and_repeats(message, data):
    """Fields out of order, repeated (last wins) and unknown fields of every wire type."""
    first = data.draw(_values(message))
    second = data.draw(_values(message))
    blob = _google(message, first).SerializeToString() + _google(message, second).SerializeToString()
    unknown = b"\xf8\x06\x05" + b"\xfa\x06\x02ab" + b"\xf9\x06" + b"\x00" * 8 + b"\xfd\x06" + b"\x00" * 4
    blob = unknown + blob + unknown
    theirs = getattr(protocol, message.__name__)()
    theirs.ParseFromString(blob)
    ours = message.decode(blob)
    for _, name, _kind in message.FIELDS:
        assert getattr(ours, name) == getattr(theirs, name), name


@pytest.mark.parametrize("message", pb.MESSAGES, ids=lambda m: m.__name__)
@settings(max_examples=200, deadline=None)
@given(blob=st.binary(max_size=64))
def test_malformed_raises_only_decode_error(message, blob):
    try:
        message.decode(blob)
    except pb.DecodeError:
        pass


@pytest.mark.parametrize("blob", [
    b"\x0a\x05ab",  # length past the end
    b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # 11-byte varint
    b"\x08\x80",  # truncated varint
    b"\x0b",  # group start (wire type 3)
    b"\x00\x01",  # field number 0
    b"\x09\x00\x00",  # truncated fixed64
])
def test_malformed_examples(blob):
    with pytest.raises(pb.DecodeError):
        pb.PubMsg.decode(blob)


def test_negative_int32_is_ten_bytes_like_go():
    encoded = pb.ConnectRequest(pingInterval=-1).encode()
    assert encoded == b"\x28" + b"\xff" * 9 + b"\x01"
    assert pb.ConnectRequest.decode(encoded).pingInterval == -1


def test_non_utf8_strings_round_trip():
    raw = b"\x0a\x02\xff\xfe"  # a Go client may send any bytes in a string field
    msg = pb.PubMsg.decode(raw)
    assert msg.encode() == raw
