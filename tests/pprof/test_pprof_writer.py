"""samprof.pprof's writer: what it writes reads back equal, the independent
protobuf decoder (tests/support/pprof_proto.py) and ``go tool pprof`` read
the same contents, and it refuses what pprof cannot hold."""

from __future__ import annotations

import gzip
from typing import List

import pytest
from support import pprof_proto
from support.profiles import go_pprof, parse_raw, top_showing
from support.profiles import top_table as table

from samprof.pprof import (
    Frame,
    Function,
    Label,
    Line,
    Location,
    Mapping,
    PprofError,
    Profile,
    Sample,
    ValueType,
    read,
    write,
)
from samprof.report import top

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds

HEAP_TYPES = [
    ValueType("alloc_objects", "count"),
    ValueType("alloc_space", "bytes"),
    ValueType("inuse_objects", "count"),
    ValueType("inuse_space", "bytes"),
]


def heap_like_profile() -> Profile:
    """Four sample types, numeric labels with and without units, string
    labels, comments, times, two mappings, an inlined location and a
    function with a system name: every field pprof has."""
    p = Profile(
        sample_types=list(HEAP_TYPES),
        period_type=ValueType("space", "bytes"),
        period=512 * 1024,
        time_nanos=1_700_000_000_123_456_789,
        duration_nanos=30_000_000_000,
        comments=["samprof test", "second comment"],
        default_sample_type="alloc_space",
        drop_frames="runtime\\..*",
        keep_frames="runtime\\.keep",
        doc_url="https://example.com/doc",
        mappings=[
            Mapping(1, 0x400000, 0x500000, 0, "python3", "abc123", True, True, True, False),
            Mapping(2, 0x7F0000000000, 0x7F0000100000, 0x1000, "libfoo.so", "", True),
        ],
    )
    p.add_sample(
        [Frame("alloc_list", "app/models.py", 12), Frame("handler", "app/views.py", 40)],
        [3, 1_572_864, 1, 524_288],
        labels=[
            Label("bytes", num=524_288, num_unit="bytes"),
            Label("thread_name", str_value="MainThread"),
            Label("route", str_value="/users"),
        ],
    )
    p.add_sample(
        [Frame("build_dict", "app/models.py", 30), Frame("handler", "app/views.py", 41)],
        [1, 524_288, 0, 0],
        labels={"bytes": 64, "thread_name": "worker-1", "request_id": 7},
    )
    p.add_sample([Frame("handler", "app/views.py", 40)], [2, 1_048_576, 2, 1_048_576])
    # A location written by hand: two inlined lines (innermost first), in
    # the second mapping, at an address.
    p.functions.append(Function(90, "inner", "_ZN5inner", "lib.c", 5))
    p.functions.append(Function(91, "outer", "", "lib.c", 20))
    p.locations.append(
        Location(90, mapping_id=2, address=0x7F0000000ABC, lines=[Line(90, 7, 3), Line(91, 22)])
    )
    p.samples.append(Sample([90, 2], [5, 2_621_440, 5, 2_621_440], [Label("bytes", num=99)]))
    p.validate()
    return p


def test_round_trip_is_equal() -> None:
    p = heap_like_profile()
    data = write(p)
    assert data[:2] == b"\x1f\x8b"
    assert read(data) == p
    raw = write(p, compress=False)
    assert gzip.decompress(data) == raw
    assert read(raw) == p
    # The same profile always gives the same bytes.
    assert write(heap_like_profile()) == data
    # Writing what was read gives the same bytes again.
    assert write(read(data)) == data


def test_empty_profile_round_trips() -> None:
    assert read(write(Profile())) == Profile()


def test_extreme_integers_round_trip() -> None:
    p = Profile(sample_types=[ValueType("a", "count"), ValueType("b", "count")])
    p.mappings.append(Mapping(2**64 - 1, 0, 2**64 - 1, 2**64 - 1))
    p.functions.append(Function(2**64 - 1, "f", start_line=-(2**63)))
    p.locations.append(
        Location(2**63, mapping_id=2**64 - 1, address=2**64 - 1, lines=[Line(2**64 - 1, 2**63 - 1)])
    )
    p.samples.append(Sample([2**63], [-(2**63), 2**63 - 1], [Label("n", num=-1, num_unit="u")]))
    p.time_nanos = -1
    p.period = 2**63 - 1
    assert read(write(p)) == p


def test_strings_round_trip() -> None:
    p = Profile(sample_types=[ValueType("samples", "count")])
    p.add_sample([Frame("naïve_函数", "/srv/app/ünï.py", 1)], [1], {"emoji": "🔥", "empty": ""})
    assert read(write(p)) == p
    # A file name python decoded with surrogateescape is written as its
    # original bytes, which are not UTF-8; the reader replaces them.
    q = Profile(sample_types=[ValueType("samples", "count")])
    q.add_sample([Frame("f", "/srv/\udcff.py", 1)], [1])
    back = read(write(q))
    assert back.functions[0].filename == "/srv/\ufffd.py"


def test_independent_decoder_agrees() -> None:
    p = heap_like_profile()
    # Not pprof_proto.check_well_formed: it also holds profiles to samprof's
    # own conventions (every location mapped), which this one leaves out.
    msg = pprof_proto.decode(write(p))
    strings = list(msg.string_table)
    assert strings[0] == ""
    assert [(strings[t.type], strings[t.unit]) for t in msg.sample_type] == [
        (t.type, t.unit) for t in HEAP_TYPES
    ]
    assert (strings[msg.period_type.type], msg.period) == ("space", 512 * 1024)
    assert [strings[c] for c in msg.comment] == p.comments
    assert strings[msg.default_sample_type] == "alloc_space"
    assert (msg.time_nanos, msg.duration_nanos) == (p.time_nanos, p.duration_nanos)
    assert strings[msg.drop_frames] == p.drop_frames and strings[msg.doc_url] == p.doc_url
    functions = {f.id: strings[f.name] for f in msg.function}
    locations = {loc.id: loc for loc in msg.location}
    got = []
    for s in msg.sample:
        names = [functions[ln.function_id] for lid in s.location_id for ln in locations[lid].line]
        labels = {
            strings[lb.key]: strings[lb.str] if lb.str else (lb.num, strings[lb.num_unit])
            for lb in s.label
        }
        got.append((names, list(s.value), labels))
    want = []
    for s in p.samples:
        labels = {
            lb.key: lb.str_value if lb.str_value else (lb.num, lb.num_unit) for lb in s.labels
        }
        want.append(([f.function for f in p.stack_of(s)], s.values, labels))
    assert got == want
    inlined = locations[90]
    assert (inlined.mapping_id, inlined.address) == (2, 0x7F0000000ABC)
    assert [(ln.function_id, ln.line, ln.column) for ln in inlined.line] == [
        (90, 7, 3),
        (91, 22, 0),
    ]


def test_go_tool_pprof_raw_agrees_with_our_reader() -> None:
    p = heap_like_profile()
    data = write(p)
    text = go_pprof(data, "-raw")
    header = text.split("Samples:")[0]
    assert "PeriodType: space bytes" in header and "Period: 524288" in header
    assert "Duration: 30s" in header
    for comment in p.comments:
        assert f"Comment: {comment}" in header
    types_line = text.split("Samples:\n")[1].splitlines()[0]
    assert types_line.split() == [
        "alloc_objects/count",
        "alloc_space/bytes[dflt]",
        "inuse_objects/count",
        "inuse_space/bytes",
    ]

    ours = read(data)
    want = []
    for s in ours.samples:
        labels = {}
        for lb in s.labels:
            if lb.str_value:
                labels[lb.key] = lb.str_value
            else:
                labels[lb.key] = f"{lb.num} {lb.num_unit}" if lb.num_unit else str(lb.num)
        stack = tuple(frame.function for frame in ours.stack_of(s))
        want.append((tuple(s.values), stack, labels))
    assert parse_raw(text) == want


@pytest.mark.parametrize("sample_type", [t.type for t in HEAP_TYPES])
def test_go_tool_pprof_top_agrees_with_our_report(sample_type: str) -> None:
    data = write(heap_like_profile())
    theirs = go_pprof(data, "-top", f"-sample_index={sample_type}")
    ours = top(read(data), sample_type=sample_type)
    assert table(ours) == table(theirs)
    assert top_showing(ours) == top_showing(theirs)


def test_written_cpu_profile_reads_in_go() -> None:
    """A profile built the way samprof's CPU profiles are (samples/count,
    cpu/nanoseconds, period 10ms) shows in go tool pprof as built."""
    p = Profile(
        sample_types=[ValueType("samples", "count"), ValueType("cpu", "nanoseconds")],
        period_type=ValueType("cpu", "nanoseconds"),
        period=10_000_000,
        duration_nanos=2_000_000_000,
    )
    p.add_sample([Frame("hot", "a.py", 1), Frame("main", "a.py", 9)], [70, 700_000_000])
    p.add_sample([Frame("cold", "a.py", 5), Frame("main", "a.py", 9)], [30, 300_000_000])
    rows = table(go_pprof(write(p), "-top"))
    assert rows == [
        ["700ms", "70.00%", "70.00%", "700ms", "70.00%", "hot"],
        ["300ms", "30.00%", "100%", "300ms", "30.00%", "cold"],
        ["0", "0%", "100%", "1000ms", "100%", "main"],
    ]


# --------------------------------------------------------------------------
# What the writer refuses.


def _one_sample(values: List[int]) -> Profile:
    p = Profile(sample_types=[ValueType("v", "count")] * len(values))
    p.add_sample([Frame("f", "f.py", 1)], values)
    return p


def test_value_out_of_int64_range_is_refused() -> None:
    with pytest.raises(PprofError, match=r"sample 0 values holds 9223372036854775808"):
        write(_one_sample([2**63]))
    with pytest.raises(PprofError, match="int64"):
        write(_one_sample([-(2**63) - 1]))


def test_id_out_of_uint64_range_is_refused() -> None:
    p = _one_sample([1])
    p.mappings.append(Mapping(2**64))
    with pytest.raises(PprofError, match="mapping 18446744073709551616 id"):
        write(p)


def test_invalid_profile_is_refused() -> None:
    p = _one_sample([1])
    p.samples.append(Sample([1], [1, 2]))
    with pytest.raises(PprofError, match="sample 1 has 2 values but the profile has 1"):
        write(p)
    q = _one_sample([1])
    q.samples.append(Sample([42], [1]))
    with pytest.raises(PprofError, match="unknown location id 42"):
        write(q)
    r = _one_sample([1])
    r.functions.append(Function(1, "again"))
    with pytest.raises(PprofError, match="duplicate function id 1"):
        write(r)


# --------------------------------------------------------------------------
# add_sample.


def test_add_sample_makes_each_function_and_location_once() -> None:
    p = Profile(sample_types=[ValueType("samples", "count")])
    p.add_sample([Frame("a", "x.py", 1), Frame("main", "x.py", 9)], [1])
    p.add_sample([("a", "x.py", 2), ("main", "x.py", 9)], [1])
    p.add_sample([Frame("a", "y.py", 1)], [1])
    assert [(f.id, f.name, f.filename) for f in p.functions] == [
        (1, "a", "x.py"),
        (2, "main", "x.py"),
        (3, "a", "y.py"),
    ]
    assert [(loc.id, loc.lines) for loc in p.locations] == [
        (1, [Line(1, 1)]),
        (2, [Line(2, 9)]),
        (3, [Line(1, 2)]),
        (4, [Line(3, 1)]),
    ]
    assert [s.location_ids for s in p.samples] == [[1, 2], [3, 2], [4]]


def test_add_sample_to_a_read_profile_reuses_its_entries() -> None:
    p = read(write(heap_like_profile()))
    functions, locations = len(p.functions), len(p.locations)
    p.add_sample([Frame("handler", "app/views.py", 40)], [1, 2, 3, 4])
    assert (len(p.functions), len(p.locations)) == (functions, locations)
    p.add_sample([Frame("new", "app/views.py", 1)], [1, 2, 3, 4])
    assert p.functions[-1].id == 92 and p.locations[-1].id == 91
    assert read(write(p)) == p


def test_add_sample_after_the_lists_were_edited_by_hand() -> None:
    p = Profile(sample_types=[ValueType("samples", "count")])
    p.functions.append(Function(5, "f", filename="f.py"))
    p.locations.append(Location(8, lines=[Line(5, 3)]))
    p.add_sample([Frame("f", "f.py", 3), Frame("g", "f.py", 1)], [1])
    assert p.samples[0].location_ids == [8, 9]
    assert p.functions[-1].id == 6


def test_add_sample_rejects_bad_input() -> None:
    p = Profile(sample_types=[ValueType("samples", "count")])
    with pytest.raises(ValueError, match="2 values for 1 sample types"):
        p.add_sample([Frame("f", "f.py", 1)], [1, 2])
    with pytest.raises(ValueError, match="label 'x': value must be str or int, not float"):
        p.add_sample([Frame("f", "f.py", 1)], [1], {"x": 1.5})
    with pytest.raises(ValueError, match="not bool"):
        p.add_sample([Frame("f", "f.py", 1)], [1], {"x": True})
    assert p.samples == []
