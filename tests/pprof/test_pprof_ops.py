"""merge, diff, scale, filter and prune against what ``go tool pprof`` does
with the same files: several files on its command line (merge),
``-diff_base``, ``-tagfocus`` and a profile's ``drop_frames``."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest
from support.profiles import cpu_profile, go_pprof_files, top_showing, top_table
from support.workloads import burn_python_for, spin_python

import samprof
from samprof.pprof import (
    DIFF_BASE_LABEL,
    Frame,
    Label,
    Line,
    Location,
    Profile,
    ValueType,
    compact,
    diff,
    filter,
    merge,
    prune,
    read,
    scale,
    write,
)
from samprof.report import top

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds

CPU_TYPES = [ValueType("samples", "count"), ValueType("cpu", "nanoseconds")]
MS = 1_000_000


def rows(report: str) -> List[List[str]]:
    """A -top report's "Showing nodes" line and its rows."""
    return [[top_showing(report)], *top_table(report)]


def save(tmp_path: Path, name: str, profile: Profile) -> Path:
    path = tmp_path / name
    path.write_bytes(write(profile))
    return path


def _work_a() -> None:
    burn_python_for(0.25, fn=spin_python)


def _work_b() -> None:
    burn_python_for(0.25, fn=lambda n: sum(i * i for i in range(n)))


@pytest.fixture(scope="module")
def real_cpu_profiles() -> List[bytes]:
    """Two CPU profiles from samprof's core, of different work: their ids
    differ for the same functions, as in two processes."""
    out = []
    for work in (_work_a, _work_b):
        with samprof.CPUProfiler(hz=500) as prof:
            work()
            _work_a()
        assert prof.result is not None
        out.append(prof.result)
    return out


# --------------------------------------------------------------------------
# merge


def test_merge_of_real_cpu_profiles_matches_go(tmp_path: Path, real_cpu_profiles) -> None:
    a, b = (read(data) for data in real_cpu_profiles)
    paths = [tmp_path / "a.pb.gz", tmp_path / "b.pb.gz"]
    for path, data in zip(paths, real_cpu_profiles):
        path.write_bytes(data)
    merged = merge([a, b])
    merged_path = save(tmp_path, "merged.pb.gz", merged)

    theirs = go_pprof_files(paths, "-top")
    assert rows(go_pprof_files([merged_path], "-top")) == rows(theirs)
    assert rows(top(merged, n=1000)) == rows(go_pprof_files(paths, "-top", "-nodecount=1000"))
    # go tool pprof -proto a b: the merge pprof itself writes, read by us.
    go_merged = read(go_pprof_files(paths, "-proto", text=False))
    cpu = merged.sample_type_index("cpu")
    assert sum(s.values[cpu] for s in merged.samples) == sum(
        s.values[cpu] for s in go_merged.samples
    )
    assert merged.duration_nanos == a.duration_nanos + b.duration_nanos
    assert merged.time_nanos == min(a.time_nanos, b.time_nanos)


def test_merge_makes_equal_entries_one() -> None:
    a = cpu_profile({"f;main": 3, "g;main": 1})
    b = cpu_profile({"g;main": 2, "h;main": 5})
    # The same function has different ids in the two: g is 3 in a, 1 in b.
    assert (a.functions[2].name, a.functions[2].id) == ("g", 3)
    assert (b.functions[0].name, b.functions[0].id) == ("g", 1)
    merged = merge([a, b])
    by_stack = {";".join(f.function for f in merged.stack_of(s)): s.values for s in merged.samples}
    assert by_stack == {
        "f;main": [3, 30 * MS],
        "g;main": [3, 30 * MS],
        "h;main": [5, 50 * MS],
    }
    assert sorted(f.name for f in merged.functions) == ["f", "g", "h", "main"]
    assert len(merged.locations) == 4
    assert [f.id for f in merged.functions] == [1, 2, 3, 4]


def test_merge_keeps_samples_with_different_labels_apart() -> None:
    a = cpu_profile({})
    a.add_sample([Frame("f", "f.py", 1)], [1, 10], {"route": "/a"})
    a.add_sample([Frame("f", "f.py", 1)], [1, 10], {"route": "/b"})
    b = cpu_profile({})
    b.add_sample([Frame("f", "f.py", 1)], [2, 20], {"route": "/a"})
    b.add_sample([Frame("f", "f.py", 1)], [4, 40], [Label("n", num=1, num_unit="bytes")])
    b.add_sample([Frame("f", "f.py", 1)], [8, 80], [Label("n", num=1)])
    merged = merge([a, b])
    got = {
        tuple((lb.key, lb.value, lb.num_unit) for lb in s.labels): s.values for s in merged.samples
    }
    assert got == {
        (("route", "/a", ""),): [3, 30],
        (("route", "/b", ""),): [1, 10],
        (("n", 1, "bytes"),): [4, 40],
        (("n", 1, ""),): [8, 80],
    }


def test_merge_header() -> None:
    a = cpu_profile({"f": 1}, period=10 * MS, time_nanos=500, duration_nanos=7)
    a.comments = ["x", "y"]
    b = cpu_profile({"f": 1}, period=20 * MS, time_nanos=300, duration_nanos=5)
    b.comments = ["y", "z"]
    b.default_sample_type = "samples"
    merged = merge([a, b])
    assert (merged.time_nanos, merged.duration_nanos, merged.period) == (300, 12, 20 * MS)
    assert merged.comments == ["x", "y", "z"]
    assert merged.default_sample_type == "samples"
    assert merged.samples[0].values == [2, 30 * MS]


def test_merge_drops_zero_samples_and_what_only_they_used() -> None:
    p = cpu_profile({"f;main": 1})
    p.add_sample([Frame("zero", "z.py", 1)], [0, 0])
    merged = merge([p])
    assert [f.name for f in merged.functions] == ["f", "main"]
    assert len(merged.samples) == 1


def test_merge_of_values_that_cancel_out() -> None:
    """Go's delta profile: the start scaled by -1 merged with the end.
    Stacks whose values cancel are gone, with what only they used."""
    start = cpu_profile({"f;main": 3, "g;main": 2})
    end = cpu_profile({"f;main": 5, "g;main": 2, "h;main": 1})
    delta = merge([scale(start, -1), end])
    values = {delta.stack_of(s)[0].function: s.values[0] for s in delta.samples}
    assert values == {"f": 2, "h": 1}
    assert sorted(f.name for f in delta.functions) == ["f", "h", "main"]


def test_merge_maps_addresses_through_mappings() -> None:
    """The same code at another load address (another process) is one
    location; pprof keys locations by address within their mapping."""
    from samprof.pprof import Function, Mapping, Sample

    def native(start: int) -> Profile:
        p = cpu_profile({})
        p.mappings.append(Mapping(1, start, start + 0x5000, 0, "libx.so", "b1d"))
        p.functions.append(Function(1, "native_fn"))
        p.locations.append(Location(1, 1, start + 0x123, [Line(1, 0)]))
        p.samples.append(Sample([1], [1, 10]))
        p.validate()
        return p

    merged = merge([native(0x10000), native(0x7F0000)])
    assert len(merged.mappings) == 1 and len(merged.locations) == 1
    assert merged.locations[0].address == 0x10123
    assert merged.samples[0].values == [2, 20]


def test_merge_refuses_different_sample_types() -> None:
    a = cpu_profile({"f": 1})
    b = Profile(sample_types=[ValueType("samples", "count"), ValueType("wall", "nanoseconds")])
    b.period_type = a.period_type
    with pytest.raises(ValueError, match=r"profile 1 has sample types \[samples/count wall/"):
        merge([a, b])
    c = cpu_profile({"f": 1})
    c.period_type = ValueType("wall", "nanoseconds")
    with pytest.raises(ValueError, match="period type wall/nanoseconds"):
        merge([a, c])
    with pytest.raises(ValueError, match="no profiles to merge"):
        merge([])


def test_merge_leaves_its_inputs_alone() -> None:
    a = cpu_profile({"f;main": 3})
    b = cpu_profile({"f;main": 2})
    before = write(a), write(b)
    merge([a, b])
    diff(a, b)
    scale(a, 3)
    filter(a, {"x": "y"})
    prune(a, "f")
    assert (write(a), write(b)) == before


# --------------------------------------------------------------------------
# diff


def test_diff_matches_go_diff_base(tmp_path: Path, real_cpu_profiles) -> None:
    base_path = tmp_path / "base.pb.gz"
    new_path = tmp_path / "new.pb.gz"
    base_path.write_bytes(real_cpu_profiles[0])
    new_path.write_bytes(real_cpu_profiles[1])
    change = diff(read(real_cpu_profiles[1]), read(real_cpu_profiles[0]))
    theirs = go_pprof_files([new_path], "-top", "-nodecount=1000", f"-diff_base={base_path}")
    assert rows(top(change, n=1000)) == rows(theirs)
    # Written and read back by pprof, our diff shows the same.
    ours_path = save(tmp_path, "diff.pb.gz", change)
    assert rows(go_pprof_files([ours_path], "-top", "-nodecount=1000")) == rows(theirs)


def test_diff_of_known_profiles() -> None:
    base = cpu_profile({"f;main": 10, "g;main": 5})
    new = cpu_profile({"f;main": 4, "g;main": 5, "h;main": 2})
    change = diff(new, base)
    net: Dict[str, int] = {}
    for s in change.samples:
        name = change.stack_of(s)[0].function
        net[name] = net.get(name, 0) + s.values[0]
    assert net == {"f": -6, "g": 0, "h": 2}
    assert all((DIFF_BASE_LABEL in s.labels) == (s.values[0] < 0) for s in change.samples)
    report = top(change)
    # Percentages of the base's total (15 samples), as pprof shows them.
    assert "Showing nodes accounting for -40ms, 26.67% of 150ms total" in report


def test_diff_refuses_different_sample_types() -> None:
    a = cpu_profile({"f": 1})
    b = Profile(sample_types=[ValueType("samples", "count")], period_type=a.period_type)
    with pytest.raises(ValueError, match="cannot be merged"):
        diff(a, b)


# --------------------------------------------------------------------------
# scale, filter, prune, compact


def test_scale_rounds_half_away_from_zero_and_drops_zeros() -> None:
    p = cpu_profile({})
    p.add_sample([Frame("a", "a.py", 1)], [1, 3])
    p.add_sample([Frame("b", "b.py", 1)], [-3, -5])
    p.add_sample([Frame("c", "c.py", 1)], [0, 1])
    half = scale(p, 0.5)
    assert [s.values for s in half.samples] == [[1, 2], [-2, -3], [0, 1]]
    assert [s.values for s in scale(p, [1, 0]).samples] == [[1, 0], [-3, 0]]
    # -0.5 rounds to -1; [0.1, 0.3] and [0, 0.1] round to zeros and go.
    assert [s.values for s in scale(p, 0.1).samples] == [[0, -1]]
    with pytest.raises(ValueError, match="3 scale factors for 2 sample types"):
        scale(p, [1, 2, 3])
    with pytest.raises(ValueError, match="finite"):
        scale(p, float("nan"))


def test_filter_by_labels_matches_go_tagfocus(tmp_path: Path) -> None:
    p = cpu_profile({})
    p.add_sample([Frame("a", "a.py", 1), Frame("main", "m.py", 1)], [1, 10], {"route": "/a"})
    p.add_sample([Frame("b", "b.py", 1), Frame("main", "m.py", 1)], [2, 20], {"route": "/b"})
    p.add_sample([Frame("c", "c.py", 1)], [4, 40], {"route": "/a", "size": 3})
    p.add_sample([Frame("d", "d.py", 1)], [8, 80])
    only_a = filter(p, {"route": "/a"})
    assert sorted(s.values[0] for s in only_a.samples) == [1, 4]
    assert sorted(f.name for f in only_a.functions) == ["a", "c", "main"]
    assert [s.values[0] for s in filter(p, {"route": "/a", "size": 3}).samples] == [4]
    assert sorted(s.values[0] for s in filter(p, {"route": ["/a", "/b"]}).samples) == [1, 2, 4]
    assert filter(p, {"size": "3"}).samples == []  # a string never matches a number
    path = save(tmp_path, "p.pb.gz", p)
    theirs = go_pprof_files([path], "-top", "-tagfocus=route=^/a$")
    # pprof's percentages stay shares of the whole profile; compare the
    # values and names.
    assert [(r[0], r[3], r[5]) for r in rows(top(only_a))[1:]] == [
        (r[0], r[3], r[5]) for r in rows(theirs)[1:]
    ]


def test_prune_matches_go_drop_frames(tmp_path: Path) -> None:
    p = cpu_profile(
        {
            "leaf;helper;lib.call;main": 5,
            "other;lib.call;main": 3,
            "lib.call": 2,
            "x;main": 1,
        }
    )
    pruned = prune(p, r"lib\..*")
    stacks = sorted(
        (";".join(f.function for f in pruned.stack_of(s)), s.values[0]) for s in pruned.samples
    )
    # Frames from the match down are cut; a stack whose root matches is kept.
    assert stacks == [("lib.call", 2), ("main", 3), ("main", 5), ("x;main", 1)]
    assert "helper" not in {f.name for f in pruned.functions}
    # pprof applies a profile's drop_frames the same way when it loads it.
    marked = cpu_profile({})
    marked.samples, marked.locations, marked.functions = p.samples, p.locations, p.functions
    marked.drop_frames = r"lib\..*"
    marked.validate()
    theirs = go_pprof_files([save(tmp_path, "marked.pb.gz", marked)], "-top")
    ours = go_pprof_files([save(tmp_path, "pruned.pb.gz", pruned)], "-top")
    assert rows(ours) == rows(theirs)
    # keep spares what it matches.
    kept = prune(p, r"lib\..*", keep=r"lib\.call")
    assert [kept.stack_of(s) for s in kept.samples] == [p.stack_of(s) for s in p.samples]


def test_prune_cuts_inlined_lines_below_a_match() -> None:
    from samprof.pprof import Function, Sample

    p = cpu_profile({})
    p.functions += [Function(1, "inner"), Function(2, "lib.mid"), Function(3, "outer")]
    p.locations.append(Location(1, lines=[Line(1, 1), Line(2, 2), Line(3, 3)]))
    p.samples.append(Sample([1], [1, 10]))
    p.validate()
    pruned = prune(p, r"lib\..*")
    assert [f.function for f in pruned.stack_of(pruned.samples[0])] == ["outer"]
    assert [f.function for f in p.stack_of(p.samples[0])] == ["inner", "lib.mid", "outer"]


def test_compact_merges_equal_stacks() -> None:
    p = cpu_profile({"a;main": 1})
    p.add_sample([Frame("a", "a.py", 1), Frame("main", "main.py", 1)], [2, 20])
    assert len(p.samples) == 2
    c = compact(p)
    assert [s.values for s in c.samples] == [[3, 10 * MS + 20]]
