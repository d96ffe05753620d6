"""samprof.pprof, the pure-Python reader, against profiles encoded with
google.protobuf (tests/support/pprof_proto.py), so each decoder checks the other."""

from __future__ import annotations

import gzip
import random
from typing import List

import pytest
from support import pprof_proto
from support.pprof_proto import ProfileBuilder

from samprof.pprof import (
    Frame,
    Function,
    Label,
    Line,
    Location,
    Mapping,
    PprofError,
    Profile,
    ValueType,
)

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds

# --------------------------------------------------------------------------
# Raw wire helpers, for what google.protobuf will not write (padded varints,
# unknown fields, corrupt data).


def varint(value: int, pad_to: int = 0) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value or len(out) + 1 < pad_to:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def length_delimited(field: int, payload: bytes, pad_to: int = 0) -> bytes:
    return key(field, 2) + varint(len(payload), pad_to) + payload


def full_profile(packed: bool = True) -> ProfileBuilder:
    """A profile that sets every field of every message."""
    b = ProfileBuilder(packed=packed)
    msg = b.msg
    m = msg.mapping[0]
    m.memory_start = 0x400000
    m.memory_limit = 0x500000
    m.file_offset = 0x1000
    m.build_id = b.string("abc123")
    m.has_inline_frames = True
    main = b.function("main", "/app/main.py", start_line=1)
    parse = b.function("Parser.parse", "/app/parse.py", start_line=10)
    helper = b.function("helper", "/app/parse.py", start_line=40)
    native = b.function("<native thread>")
    loc_main = b.location(main, line=5, address=0x401000)
    # helper inlined into Parser.parse: innermost (helper) first.
    loc_parse = b.location(helper, line=42, inlined=[(parse, 12)], address=0x402000)
    loc_native = b.location(native)
    msg.location[1].is_folded = True
    msg.location[1].line[0].column = 7
    b.sample([loc_parse, loc_main], [3, 30_000_000], thread_name="MainThread", thread_id=1234)
    b.sample([loc_main], [1, 10_000_000], thread_name="worker", thread_id=5678)
    b.sample([loc_native], [2, 20_000_000], thread_name="", thread_id=99)
    msg.drop_frames = b.string("drop.*")
    msg.keep_frames = b.string("keep.*")
    msg.time_nanos = 1_700_000_000_123_456_789
    msg.duration_nanos = 2_500_000_000
    msg.period_type.type = b.string("cpu")
    msg.period_type.unit = b.string("nanoseconds")
    msg.period = 10_000_000
    msg.comment.extend([b.string("first comment"), b.string("second comment")])
    msg.default_sample_type = b.string("samples")
    msg.doc_url = b.string("https://example.com/doc")
    return b


# --------------------------------------------------------------------------
# Decoding.


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
@pytest.mark.parametrize("gzipped", [True, False], ids=["gzip", "raw"])
def test_every_field_round_trips(packed: bool, gzipped: bool) -> None:
    data = full_profile(packed).encode(gzipped=gzipped)
    p = Profile.parse(data)

    assert p.sample_types == [ValueType("samples", "count"), ValueType("cpu", "nanoseconds")]
    assert p.period_type == ValueType("cpu", "nanoseconds")
    assert p.period == 10_000_000
    assert p.time_nanos == 1_700_000_000_123_456_789
    assert p.duration_nanos == 2_500_000_000
    assert p.drop_frames == "drop.*"
    assert p.keep_frames == "keep.*"
    assert p.comments == ["first comment", "second comment"]
    assert p.default_sample_type == "samples"
    assert p.doc_url == "https://example.com/doc"
    assert p.string_table[0] == ""
    assert p.mappings == [
        Mapping(
            id=1,
            memory_start=0x400000,
            memory_limit=0x500000,
            file_offset=0x1000,
            filename="python",
            build_id="abc123",
            has_functions=True,
            has_filenames=True,
            has_line_numbers=True,
            has_inline_frames=True,
        )
    ]
    assert p.functions == [
        Function(1, "main", "main", "/app/main.py", 1),
        Function(2, "Parser.parse", "Parser.parse", "/app/parse.py", 10),
        Function(3, "helper", "helper", "/app/parse.py", 40),
        Function(4, "<native thread>", "<native thread>", "", 0),
    ]
    assert p.locations == [
        Location(1, 1, 0x401000, [Line(1, 5)]),
        Location(2, 1, 0x402000, [Line(3, 42, 7), Line(2, 12)], is_folded=True),
        Location(3, 1, 0, [Line(4, 0)]),
    ]
    assert [s.location_ids for s in p.samples] == [[2, 1], [1], [3]]
    assert [s.values for s in p.samples] == [[3, 30_000_000], [1, 10_000_000], [2, 20_000_000]]
    assert p.samples[0].labels == [
        Label("thread_name", str_value="MainThread"),
        Label("thread_id", num=1234),
    ]


def test_agrees_with_protobuf_decoder() -> None:
    data = full_profile().encode()
    msg = pprof_proto.decode(data)
    pprof_proto.check_well_formed(msg)
    p = Profile.parse(data)
    st = msg.string_table
    assert p.string_table == list(st)
    assert len(p.samples) == len(msg.sample)
    for ours, theirs in zip(p.samples, msg.sample):
        assert ours.location_ids == list(theirs.location_id)
        assert ours.values == list(theirs.value)
        assert [(lb.key, lb.str_value, lb.num) for lb in ours.labels] == [
            (st[lb.key], st[lb.str], lb.num) for lb in theirs.label
        ]
    for ours, theirs in zip(p.functions, msg.function):
        assert (ours.id, ours.name, ours.filename, ours.start_line) == (
            theirs.id,
            st[theirs.name],
            st[theirs.filename],
            theirs.start_line,
        )
    for ours, theirs in zip(p.locations, msg.location):
        assert ours.id == theirs.id
        assert [(ln.function_id, ln.line) for ln in ours.lines] == [
            (ln.function_id, ln.line) for ln in theirs.line
        ]


def test_extreme_integers() -> None:
    b = ProfileBuilder()
    loc = b.location(b.function("f"), line=-1, address=2**64 - 1)
    b.sample([loc], [-(2**63), 2**63 - 1], n=-5)
    b.msg.time_nanos = -1
    p = Profile.parse(b.encode())
    assert p.samples[0].values == [-(2**63), 2**63 - 1]
    assert p.locations[0].address == 2**64 - 1
    assert p.locations[0].lines[0].line == -1
    assert p.labels_of(p.samples[0]) == {"n": -5}
    assert p.time_nanos == -1


def test_padded_varints_and_unknown_fields_are_accepted() -> None:
    # samprof's encoder pads nested-message lengths to 5 bytes; readers must
    # also skip fields they do not know, of every wire type.
    unknown = (
        key(100, 0)
        + varint(7)
        + key(101, 1)
        + b"\0" * 8
        + length_delimited(102, b"xyz")
        + key(103, 5)
        + b"\0" * 4
    )
    value_type = key(1, 0) + varint(1, pad_to=3) + key(2, 0) + varint(2)
    function = key(1, 0) + varint(1) + key(2, 0) + varint(3) + unknown
    location = key(1, 0) + varint(1) + length_delimited(4, key(1, 0) + varint(1), pad_to=5)
    sample = length_delimited(1, varint(1), pad_to=5) + length_delimited(2, varint(9)) + unknown
    data = (
        b"".join(length_delimited(6, s.encode(), pad_to=5) for s in ["", "cpu", "ns", "f"])
        + length_delimited(1, value_type, pad_to=5)
        + length_delimited(5, function, pad_to=5)
        + length_delimited(4, location, pad_to=5)
        + unknown
        + length_delimited(2, sample, pad_to=5)
    )
    p = Profile.parse(data)
    assert p.sample_types == [ValueType("cpu", "ns")]
    assert p.functions[0].name == "f"
    assert p.samples[0].values == [9]
    assert p.stack_of(p.samples[0]) == [Frame("f", "", 0)]


def test_last_value_of_a_singular_field_wins() -> None:
    data = ProfileBuilder().encode(gzipped=False) + key(12, 0) + varint(1) + key(12, 0) + varint(2)
    assert Profile.parse(data).period == 2


def test_multi_member_gzip() -> None:
    raw = full_profile().encode(gzipped=False)
    half = len(raw) // 2
    # Concatenated gzip members decompress to the concatenated data, and
    # concatenated protobuf messages merge.
    data = gzip.compress(raw[:half]) + gzip.compress(raw[half:])
    assert Profile.parse(data) == Profile.parse(raw)


# --------------------------------------------------------------------------
# Helpers.


def test_stack_of_is_leaf_first_with_inlined_frames() -> None:
    p = Profile.parse(full_profile().encode())
    assert p.stack_of(p.samples[0]) == [
        Frame("helper", "/app/parse.py", 42),
        Frame("Parser.parse", "/app/parse.py", 12),
        Frame("main", "/app/main.py", 5),
    ]
    assert p.stack_of(p.samples[2]) == [("<native thread>", "", 0)]


def test_stack_of_location_without_lines_shows_address() -> None:
    b = ProfileBuilder()
    loc = b.msg.location.add()
    loc.id = 7
    loc.address = 0xBEEF
    b.sample([7], [1, 1])
    p = Profile.parse(b.encode())
    assert p.stack_of(p.samples[0]) == [Frame("0xbeef", "", 0)]


def test_labels_of() -> None:
    p = Profile.parse(full_profile().encode())
    assert p.labels_of(p.samples[0]) == {"thread_name": "MainThread", "thread_id": 1234}
    assert p.labels_of(p.samples[1]) == {"thread_name": "worker", "thread_id": 5678}
    b = ProfileBuilder()
    loc = b.frame("f")
    s = b.sample([loc], [1, 1], {"k": "first"})
    extra = s.label.add()
    extra.key = b.string("k")
    extra.str = b.string("second")
    p = Profile.parse(b.encode())
    assert p.labels_of(p.samples[0]) == {"k": "first"}
    assert [lb.value for lb in p.samples[0].labels] == ["first", "second"]


def test_lookups_by_id() -> None:
    p = Profile.parse(full_profile().encode())
    assert p.function(2).name == "Parser.parse"
    assert p.location(3).lines[0].function_id == 4
    assert p.mapping(1).filename == "python"
    with pytest.raises(KeyError):
        p.function(99)
    with pytest.raises(KeyError):
        p.location(0)


def test_sample_type_index_and_default() -> None:
    p = Profile.parse(full_profile().encode())
    assert p.sample_type_index("samples") == 0
    assert p.sample_type_index("cpu") == 1
    assert p.sample_type_index("cpu/nanoseconds") == 1
    with pytest.raises(ValueError, match="samples, cpu"):
        p.sample_type_index("wall")
    assert p.default_sample_index() == 0  # default_sample_type = samples
    p.default_sample_type = ""
    assert p.default_sample_index() == 1  # pprof's default: the last
    p.default_sample_type = "nonexistent"
    assert p.default_sample_index() == 1
    with pytest.raises(ValueError):
        Profile().default_sample_index()


def test_parse_rejects_non_bytes() -> None:
    with pytest.raises(TypeError):
        Profile.parse("not bytes")  # type: ignore[arg-type]


def test_bytes_like_inputs() -> None:
    data = full_profile().encode()
    assert Profile.parse(bytearray(data)) == Profile.parse(memoryview(data)) == Profile.parse(data)


# --------------------------------------------------------------------------
# Errors.


def test_pprof_error_is_a_value_error() -> None:
    assert issubclass(PprofError, ValueError)


def _edit(build) -> bytes:  # type: ignore[no-untyped-def]
    b = full_profile()
    build(b)
    return b.encode()


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "empty"),
        (b"\x1f\x8b" + b"\0" * 20, "gzip"),
        (gzip.compress(b"x" * 100, mtime=0)[:-10], "gzip"),
        (b"hello, world\n", "unsupported wire type 4"),
        (b"hhhh", "string_table"),
        (b"\x08" + b"\xff" * 11, "10 bytes"),
        (b"\x08" + b"\xff" * 9 + b"\x7f", "64 bits"),
        (b"\x08\x80", "truncated varint"),
        (b"\x32\x05ab", "truncated"),
        (b"\x0b", "wire type 3"),
        (b"\x0e", "wire type 6"),
        (b"\x09\0\0", "truncated fixed"),
        (b"\x00\x00", "field number 0"),
        (length_delimited(6, b"") + key(9, 2) + varint(1) + b"x", "time_nanos has wire type 2"),
        (length_delimited(6, b"") + key(1, 0) + varint(1), "sample_type has wire type 0"),
        (length_delimited(6, b"") + key(6, 0) + varint(1), "string_table has wire type 0"),
        (length_delimited(6, b"x"), r"string_table\[0\]"),
        (length_delimited(6, b"") + key(13, 0) + varint(5), "out of range"),
    ],
)
def test_corrupt_input(data: bytes, message: str) -> None:
    with pytest.raises(PprofError, match=message):
        Profile.parse(data)


def _set_function_name(b: ProfileBuilder) -> None:
    b.msg.function[0].name = 1000


def _set_label_key(b: ProfileBuilder) -> None:
    b.msg.sample[0].label[0].key = 1000


def _set_negative_index(b: ProfileBuilder) -> None:
    b.msg.sample_type[0].unit = -1


def _unknown_location(b: ProfileBuilder) -> None:
    b.msg.sample[0].location_id.append(42)


def _unknown_function(b: ProfileBuilder) -> None:
    b.msg.location[0].line[0].function_id = 42


def _unknown_mapping(b: ProfileBuilder) -> None:
    b.msg.location[0].mapping_id = 42


def _too_few_values(b: ProfileBuilder) -> None:
    del b.msg.sample[1].value[1]


def _too_many_values(b: ProfileBuilder) -> None:
    b.msg.sample[1].value.append(1)


def _no_sample_types(b: ProfileBuilder) -> None:
    del b.msg.sample_type[:]


def _duplicate_function(b: ProfileBuilder) -> None:
    b.msg.function[1].id = 1


def _duplicate_location(b: ProfileBuilder) -> None:
    b.msg.location[1].id = 1


def _zero_location_id(b: ProfileBuilder) -> None:
    b.msg.location[0].id = 0


def _zero_mapping_id(b: ProfileBuilder) -> None:
    b.msg.mapping[0].id = 0


@pytest.mark.parametrize(
    "edit, message",
    [
        (_set_function_name, "string index 1000 out of range"),
        (_set_label_key, "string index 1000 out of range"),
        (_set_negative_index, "string index -1 out of range"),
        (_unknown_location, "unknown location id 42"),
        (_unknown_function, "unknown function id 42"),
        (_unknown_mapping, "unknown mapping id 42"),
        (_too_few_values, "sample 1 has 1 values but the profile has 2 sample types"),
        (_too_many_values, "sample 1 has 3 values"),
        (_no_sample_types, "0 sample types"),
        (_duplicate_function, "duplicate function id 1"),
        (_duplicate_location, "duplicate location id 1"),
        (_zero_location_id, "location with id 0"),
        (_zero_mapping_id, "mapping with id 0"),
    ],
)
def test_inconsistent_profile(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PprofError, match=message):
        Profile.parse(_edit(edit))
    with pytest.raises(AssertionError):
        pprof_proto.check_well_formed(pprof_proto.decode(_edit(edit)))


def _parse_or_pprof_error(data: bytes) -> None:
    """Parse must either succeed, leaving a profile whose stacks all resolve,
    or raise PprofError; anything else is a reader bug."""
    try:
        p = Profile.parse(data)
    except PprofError:
        return
    for sample in p.samples:
        p.stack_of(sample)
        p.labels_of(sample)


def test_every_truncation_is_handled() -> None:
    raw = full_profile().encode(gzipped=False)
    for end in range(len(raw)):
        _parse_or_pprof_error(raw[:end])
    gz = gzip.compress(raw)
    for end in range(len(gz)):
        with pytest.raises(PprofError):
            Profile.parse(gz[:end])


def test_random_corruption_is_handled() -> None:
    rng = random.Random(20240601)
    raw = full_profile().encode(gzipped=False)
    for _ in range(2000):
        data = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        _parse_or_pprof_error(bytes(data))
    for _ in range(500):
        _parse_or_pprof_error(bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))


# --------------------------------------------------------------------------
# A real profile from the C core, read by both decoders.


# Not support.workloads.burn_python_for: the test below asserts that this
# very function, `_burn`, is on the profile's stacks, and this one spends
# process CPU (time.process_time) in a generator expression.
def _burn(seconds: float) -> int:
    import time

    deadline = time.process_time() + seconds
    n = 0
    while time.process_time() < deadline:
        n += sum(i * i for i in range(1000))
    return n


def test_real_cpu_profile_cross_check() -> None:
    import samprof

    prof = samprof.CPUProfiler(hz=1000)
    with prof:
        _burn(0.3)
    data = prof.result
    assert data is not None
    msg = pprof_proto.decode(data)
    pprof_proto.check_well_formed(msg)
    p = Profile.parse(data)
    st = msg.string_table
    assert [(vt.type, vt.unit) for vt in p.sample_types] == [
        (st[vt.type], st[vt.unit]) for vt in msg.sample_type
    ]
    assert [vt.type for vt in p.sample_types] == ["samples", "cpu"]
    assert p.period_type == ValueType("cpu", "nanoseconds")
    assert len(p.samples) == len(msg.sample) > 0
    for ours, theirs in zip(p.samples, msg.sample):
        assert ours.values == list(theirs.value)
        assert ours.location_ids == list(theirs.location_id)
    leaf_names: List[str] = []
    for sample in p.samples:
        stack = p.stack_of(sample)
        leaf_names.extend(f.function for f in stack)
        labels = p.labels_of(sample)
        assert isinstance(labels.get("thread_name"), str)
        assert isinstance(labels.get("thread_id"), int)
    assert "_burn" in leaf_names
