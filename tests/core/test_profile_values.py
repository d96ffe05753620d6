"""The C core's profile table and pprof encoder on their own, compiled
from src/samprof/_c with a C driver (tests/native/profile_values.c): a
4-valued, heap-shaped profile with values decremented in place, read back
by samprof.pprof, the independent protobuf decoder and go tool pprof -raw.
Under the sanitizer run the driver is built with ASan+UBSan."""

from __future__ import annotations

import os
from pathlib import Path

from support import pprof_proto
from support.native import build_driver, run_driver
from support.profiles import go_pprof, parse_raw

from samprof.pprof import Label, read


def _build_and_run(tmp_path: Path) -> bytes:
    binary = build_driver("profile_values.c", ["profile.c", "pprof.c", "pb.c", "htab.c"], tmp_path)
    out = tmp_path / "heap.pb"
    run_driver(binary, [str(out)], dict(os.environ))
    return out.read_bytes()


def test_four_valued_profile_with_decrements(tmp_path: Path) -> None:
    data = _build_and_run(tmp_path)
    p = read(data)
    assert [str(t) for t in p.sample_types] == [
        "alloc_objects/count",
        "alloc_space/bytes",
        "inuse_objects/count",
        "inuse_space/bytes",
    ]
    assert (str(p.period_type), p.period) == ("space/bytes", 524288)
    assert p.default_sample_type == "alloc_space"
    assert p.comments == ["made by profile_values.c"]
    assert (p.time_nanos, p.duration_nanos) == (1_700_000_000_000_000_000, 5_000_000_000)

    got = {}
    for s in p.samples:
        stack = ";".join(f.function for f in p.stack_of(s))
        labels = {lb.key: lb.value for lb in s.labels}
        got[(stack, labels.get("kind"))] = (s.values, labels)
    assert got == {
        ("alloc_list;main", "list"): (
            [3, 3072, 1, 1024],
            {"thread_name": "worker-7", "thread_id": 7, "kind": "list", "route": "/users"},
        ),
        ("build_dict;main", None): ([1, 4096, 0, 0], {"thread_name": "worker-7", "thread_id": 7}),
        ("build_dict;main", "dict"): (
            [1, 4096, 1, 4096],
            {"thread_name": "worker-7", "thread_id": 7, "kind": "dict"},
        ),
        ("main", None): ([2, 64, 2, 64], {"thread_name": "worker-7", "thread_id": 7}),
        ("<samprof: stack table full>", None): (
            [4, 128, 4, 128],
            {"thread_name": "worker-7", "thread_id": 7},
        ),
    }
    assert Label("kind", str_value="list") in p.samples[0].labels

    # The independent decoder agrees, and pprof's conventions hold.
    msg = pprof_proto.decode(data)
    pprof_proto.check_well_formed(msg)
    assert sorted(list(s.value) for s in msg.sample) == sorted(s.values for s in p.samples)

    # go tool pprof -raw shows the same values, stacks and labels.
    raw = go_pprof(data, "-raw")
    assert "alloc_space/bytes[dflt]" in raw
    want = []
    for s in p.samples:
        labels = {lb.key: str(lb.value) for lb in s.labels}
        want.append((tuple(s.values), tuple(f.function for f in p.stack_of(s)), labels))
    assert sorted(parse_raw(raw)) == sorted(want)
