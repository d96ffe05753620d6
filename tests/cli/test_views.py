"""The commands that show profiles without Go: collapsed, speedscope, diff,
merge and top's views, checked by value on profiles built with the writer,
and against go tool pprof where it shows the same thing."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from support import SCRIPTS
from support.processes import describe, run_python, samprof_env
from support.profiles import cpu_profile as _cpu_profile
from support.profiles import go_pprof_files, parse_raw
from support.profiles import top_table as rows

from samprof.cli import main
from samprof.pprof import Frame, Profile, ValueType, diff, read, write

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds

MS = 1_000_000
# Broken profiles given to every command: 2,000 in each CI run (9 s here;
# the commands run no C code of samprof's); SAMPROF_FUZZ_CASES=N for a
# longer hunt (10,000 took 23 s here).
FUZZ_CASES = int(os.environ.get("SAMPROF_FUZZ_CASES", "2000"))
SCHEMA = Path(__file__).parent / "data" / "speedscope-file-format-schema.json"


def cpu_profile(stacks: Dict[str, int]) -> Profile:
    return _cpu_profile(stacks, duration_nanos=1_000_000_000)


def labelled() -> Profile:
    """Two threads and two routes; one name with a ';' in it."""
    p = Profile(
        sample_types=[ValueType("samples", "count"), ValueType("cpu", "nanoseconds")],
        period_type=ValueType("cpu", "nanoseconds"),
        period=10 * MS,
    )
    main_ = Frame("main", "app.py", 1)
    handle = Frame("handle", "app.py", 10)
    p.add_sample(
        [Frame("render", "tpl.py", 5), handle, main_],
        [3, 30 * MS],
        {"route": "/a", "thread_name": "MainThread", "thread_id": 1},
    )
    p.add_sample(
        [Frame("query", "db.py", 7), handle, main_],
        [2, 20 * MS],
        {"route": "/b", "thread_name": "worker", "thread_id": 2},
    )
    p.add_sample(
        [Frame("odd;name", "x.py", 3), main_],
        [1, 10 * MS],
        {"thread_name": "MainThread", "thread_id": 1},
    )
    p.add_sample(
        [Frame("render", "tpl.py", 6), handle, main_],
        [1, 10 * MS],
        {"route": "/a", "thread_name": "MainThread", "thread_id": 1},
    )
    return p


def run(capsys: pytest.CaptureFixture, *args: Any) -> Tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def save(tmp_path: Path, name: str, profile: Profile) -> Path:
    path = tmp_path / name
    path.write_bytes(write(profile))
    return path


# -- collapsed -------------------------------------------------------------------


def test_collapsed_folds_stacks_root_first(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = save(tmp_path, "p.pb.gz", labelled())
    status, out, err = run(capsys, "collapsed", path)
    assert (status, err) == (0, "")
    # Equal stacks (render at two lines) add up; the ';' in a name is gone.
    assert out == (
        "main;handle;query 20000000\nmain;handle;render 40000000\nmain;odd:name 10000000\n"
    )
    status, out, _ = run(capsys, "collapsed", path, "-i", "samples", "--tag", "route=/a")
    assert out == "main;handle;render 4\n"
    status, out, _ = run(capsys, "collapsed", path, "--lines", "-i", "samples", "--focus", "rend")
    assert out == (
        "main app.py:1;handle app.py:10;render tpl.py:5 3\n"
        "main app.py:1;handle app.py:10;render tpl.py:6 1\n"
    )
    out_file = tmp_path / "folded.txt"
    assert run(capsys, "collapsed", path, "-o", out_file)[0] == 0
    assert out_file.read_text().count("\n") == 3


def test_collapsed_matches_go_tool_pprof_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The same stacks and totals as go tool pprof -traces lists."""
    profile = cpu_profile({"a;b;main": 5, "c;b;main": 2, "main": 1, "a;main": 3})
    path = save(tmp_path, "p.pb.gz", profile)
    ours = {}
    for line in run(capsys, "collapsed", path, "-i", "samples")[1].splitlines():
        stack, value = line.rsplit(" ", 1)
        ours[stack] = int(value)
    theirs = {}
    for values, names, _labels in parse_raw(go_pprof_files([path], "-raw")):
        key = ";".join(reversed(names))
        theirs[key] = theirs.get(key, 0) + values[0]
    assert ours == theirs == {"main;b;a": 5, "main;b;c": 2, "main": 1, "main;a": 3}


# -- speedscope ------------------------------------------------------------------


def speedscope_doc(capsys: pytest.CaptureFixture, path: Path, *args: Any) -> Dict[str, Any]:
    out = path.parent / "out.speedscope.json"
    status, _, err = run(capsys, "speedscope", path, "-o", out, *args)
    assert (status, err) == (0, "")
    return json.loads(out.read_text())


def validate(doc: Dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))


def stacks_of(doc: Dict[str, Any], profile: Dict[str, Any]) -> Dict[str, int]:
    names = [frame["name"] for frame in doc["shared"]["frames"]]
    out: Dict[str, int] = {}
    for stack, weight in zip(profile["samples"], profile["weights"]):
        key = ";".join(names[i] for i in stack)
        out[key] = out.get(key, 0) + weight
    return out


def test_speedscope_by_value_and_against_the_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = save(tmp_path, "p.pb.gz", labelled())
    doc = speedscope_doc(capsys, path)
    validate(doc)
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert doc["exporter"].startswith("samprof ")
    [profile] = doc["profiles"]
    assert profile["type"] == "sampled" and profile["unit"] == "nanoseconds"
    assert profile["startValue"] == 0 and profile["endValue"] == 70 * MS
    # Root first, as speedscope reads a stack; frames are functions.
    assert stacks_of(doc, profile) == {
        "main;handle;render": 40 * MS,
        "main;handle;query": 20 * MS,
        "main;odd;name": 10 * MS,
    }
    frames = {frame["name"]: frame for frame in doc["shared"]["frames"]}
    assert frames["query"]["file"] == "db.py"
    assert len(doc["shared"]["frames"]) == 5

    doc = speedscope_doc(capsys, path, "--by", "thread", "-i", "samples")
    validate(doc)
    by_name = {p["name"]: p for p in doc["profiles"]}
    assert set(by_name) == {"thread MainThread (1)", "thread worker (2)"}
    assert by_name["thread worker (2)"]["unit"] == "none"
    assert stacks_of(doc, by_name["thread MainThread (1)"]) == {
        "main;handle;render": 4,
        "main;odd;name": 1,
    }
    doc = speedscope_doc(capsys, path, "--by", "route", "--lines")
    validate(doc)
    assert [p["name"] for p in doc["profiles"]] == ["route (none)", "route /a", "route /b"]
    assert {f["name"] for f in doc["shared"]["frames"]} >= {"render tpl.py:5", "render tpl.py:6"}


def test_speedscope_of_a_heap_profile_uses_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    p = Profile(
        sample_types=[ValueType("inuse_objects", "count"), ValueType("inuse_space", "bytes")],
        period_type=ValueType("space", "bytes"),
        period=512 * 1024,
    )
    p.add_sample([Frame("alloc", "a.py", 1), Frame("main", "m.py", 2)], [3, 4096])
    doc = speedscope_doc(capsys, save(tmp_path, "heap.pb.gz", p))
    validate(doc)
    assert doc["profiles"][0]["unit"] == "bytes"
    assert doc["profiles"][0]["weights"] == [4096]
    assert doc["name"].endswith("(inuse_space)")


def test_speedscope_refuses_a_diff(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a, b = cpu_profile({"x;main": 2}), cpu_profile({"x;main": 5})
    path = save(tmp_path, "d.pb.gz", diff(a, b))
    status, out, err = run(capsys, "speedscope", path, "-o", tmp_path / "o.json")
    assert status == 1 and out == ""
    assert err.startswith("samprof: error: speedscope cannot show negative values")
    assert not (tmp_path / "o.json").exists()


# -- merge -----------------------------------------------------------------------


def test_merge_sums_exactly_and_go_reads_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    one = save(tmp_path, "1.pb.gz", cpu_profile({"a;main": 3, "b;main": 1}))
    two = save(tmp_path, "2.pb.gz", cpu_profile({"a;main": 4, "c;main": 2}))
    (tmp_path / "more").mkdir()
    save(tmp_path / "more", "3.pb.gz", cpu_profile({"b;main": 5}))
    out = tmp_path / "all.pb.gz"
    status, text, err = run(capsys, "merge", one, two, tmp_path / "more", "-o", out)
    assert (status, text, err) == (0, "", "")
    merged = read(out.read_bytes())
    totals = {}
    for sample in merged.samples:
        leaf = merged.stack_of(sample)[0].function
        totals[leaf] = totals.get(leaf, 0) + sample.values[0]
    assert totals == {"a": 7, "b": 6, "c": 2}
    assert merged.duration_nanos == 3_000_000_000
    theirs: Dict[str, int] = {}
    for values, names, _labels in parse_raw(go_pprof_files([out], "-raw")):
        theirs[names[0]] = theirs.get(names[0], 0) + values[0]
    assert theirs == totals
    # go tool pprof merging the three inputs itself shows the same top.
    inputs = [one, two, tmp_path / "more" / "3.pb.gz"]
    assert rows(go_pprof_files([out], "-top")) == rows(go_pprof_files(inputs, "-top"))


def test_merge_refuses_incompatible_profiles(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cpu = save(tmp_path, "cpu.pb.gz", cpu_profile({"a;main": 1}))
    heap = Profile(
        sample_types=[ValueType("inuse_space", "bytes")], period_type=ValueType("space", "bytes")
    )
    heap.add_sample([Frame("alloc", "a.py", 1)], [100])
    heap_path = save(tmp_path, "heap.pb.gz", heap)
    out = tmp_path / "all.pb.gz"
    status, text, err = run(capsys, "merge", cpu, heap_path, "-o", out)
    assert status == 1 and text == ""
    assert err == (
        "samprof: error: the profiles are of several kinds: samples/cpu (1 file); "
        "inuse_space (1 file); pick one with -i TYPE (e.g. -i cpu)\n"
    )
    assert not out.exists()
    # -i takes the profiles of one kind (as in a continuous agent's directory).
    status, text, err = run(capsys, "merge", cpu, heap_path, "-i", "inuse_space", "-o", out)
    assert status == 0, err
    assert [t.type for t in read(out.read_bytes()).sample_types] == ["inuse_space"]


def test_merge_of_cprofile_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import cProfile
    import marshal
    import pstats

    def leaf() -> int:
        return 1

    paths = []
    for k in (2, 3):
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(k):
            leaf()
        profiler.disable()
        paths.append(tmp_path / f"{k}.prof")
        profiler.dump_stats(str(paths[-1]))
    out = tmp_path / "all.prof"
    assert run(capsys, "merge", *paths, "-o", out)[0] == 0
    stats = pstats.Stats(str(out)).stats
    assert {key[2]: value[1] for key, value in stats.items()}["leaf"] == 5
    assert marshal.loads(out.read_bytes()) == stats
    status, _, err = run(
        capsys, "merge", paths[0], save(tmp_path, "p.pb.gz", labelled()), "-o", out
    )
    assert status == 1 and "cannot merge pprof profiles with cProfile ones" in err


# -- diff ------------------------------------------------------------------------


def diff_rows(text: str) -> Dict[str, List[str]]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 6 and re.match(r"^[-+0-9]", parts[2]) and parts[0] != "base":
            out[parts[5]] = parts[:5]
    return out


def test_diff_by_value_and_against_go_diff_base(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    base = save(tmp_path, "base.pb.gz", cpu_profile({"a;main": 10, "b;main": 5, "gone;main": 2}))
    new = save(tmp_path, "new.pb.gz", cpu_profile({"a;main": 4, "b;main": 9, "fresh;b;main": 6}))
    status, text, err = run(capsys, "diff", base, new)
    assert (status, err) == (0, "")
    assert "Base: 170ms, new: 190ms, change: +20ms (+11.76%)" in text
    table = diff_rows(text)
    assert table["a"] == ["100ms", "40ms", "-60ms", "-35.29%", "-60ms"]
    assert table["fresh"] == ["0", "60ms", "+60ms", "+35.29%", "+60ms"]
    assert table["b"] == ["50ms", "90ms", "+40ms", "+23.53%", "+100ms"]
    assert table["gone"] == ["20ms", "0", "-20ms", "-11.76%", "-20ms"]
    assert "main" in text.split("function", 1)[1]  # its cum grew by 20ms
    # go tool pprof -top -diff_base BASE NEW: its flat is our change.
    theirs = {r[-1]: r[0] for r in rows(go_pprof_files([new], "-top", f"-diff_base={base}"))}
    ours = {name: r[2].lstrip("+") for name, r in table.items()}
    assert {k: v for k, v in ours.items() if v != "0"} == {
        k: v for k, v in theirs.items() if v != "0"
    }


def test_diff_normalized_matches_go(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = save(tmp_path, "base.pb.gz", cpu_profile({"a;main": 10, "b;main": 10}))
    new = save(tmp_path, "new.pb.gz", cpu_profile({"a;main": 30, "b;main": 10}))
    text = run(capsys, "diff", "--normalize", base, new)[1]
    assert "Base: 200ms, new: 400ms (normalized to 200ms), change: 0 (0%)" in text
    table = diff_rows(text)
    assert table["a"][:3] == ["100ms", "150ms", "+50ms"]
    assert table["b"][:3] == ["100ms", "50ms", "-50ms"]
    theirs = rows(go_pprof_files([new], "-top", "-normalize", f"-diff_base={base}"))
    assert {r[-1]: r[0] for r in theirs if r[-1] in "ab"} == {"a": "50ms", "b": "-50ms"}


def test_diff_refuses_different_types(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cpu = save(tmp_path, "cpu.pb.gz", cpu_profile({"a;main": 1}))
    heap = Profile(sample_types=[ValueType("inuse_space", "bytes")])
    heap.add_sample([Frame("alloc", "a.py", 1)], [100])
    status, out, err = run(capsys, "diff", cpu, save(tmp_path, "heap.pb.gz", heap))
    assert status == 1 and out == "" and err.count("\n") == 1
    assert "different sample types" in err


# -- top's views -----------------------------------------------------------------


def test_top_cum_lines_focus_and_callees_match_go(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = save(
        tmp_path, "p.pb.gz", cpu_profile({"a;b;main": 5, "c;b;main": 2, "main": 1, "a;main": 3})
    )
    out = run(capsys, "top", path, "--cum")[1]
    assert rows(out) == rows(go_pprof_files([path], "-top", "-cum"))
    assert [r[-1] for r in rows(out)] == ["main", "a", "b", "c"]
    out = run(capsys, "top", path, "--focus", "^c$")[1]
    assert rows(out) == rows(go_pprof_files([path], "-top", "-focus=^c$"))
    out = run(capsys, "top", path, "--lines")[1]
    assert rows(out)[0][-2:] == ["a", "a.py:1"]
    assert rows(out) == rows(go_pprof_files([path], "-top", "-lines"))
    status, out, err = run(capsys, "top", path, "--callees", "b")
    assert (status, err) == (0, "")
    assert out.splitlines()[0] == "Callees of b: 70ms in all"
    assert rows_of_peek(out) == {"a": "50ms", "c": "20ms"}
    peek = rows_of_peek(run(capsys, "top", path, "--callees", "main")[1])
    assert peek == {"a": "30ms", "b": "70ms", "(self)": "10ms"}
    status, out, err = run(capsys, "top", path, "--focus", "(")
    assert status == 1 and out == "" and "--focus: invalid regular expression" in err


def rows_of_peek(text: str) -> Dict[str, str]:
    return {line.split()[-1]: line.split()[0] for line in text.splitlines()[2:] if line.strip()}


# -- robust readers --------------------------------------------------------------

READERS = [
    ["top"],
    ["top", "--cum", "--lines"],
    ["top", "--callers", "main"],
    ["top", "--callees", "main"],
    ["collapsed"],
    ["speedscope", "-o", os.devnull],
    ["merge", "-o", os.devnull],
]


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "empty"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (b"hello, I am text", "not a valid pprof"),
        (b"\x0a\xff\xff\xff\xff\x0f", "truncated"),
    ],
)
def test_bad_files_give_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture, content: bytes, problem: str
) -> None:
    path = tmp_path / "bad.pb.gz"
    path.write_bytes(content)
    for command in READERS + [["diff", str(path)]]:
        status, out, err = run(capsys, command[0], path, *command[1:])
        assert status == 1, (command, out, err)
        assert err.count("\n") == 1 and err.startswith("samprof: error: "), (command, err)
        assert str(path) in err, (command, err)


def test_go_written_profile_reads(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A profile as go tool pprof -proto writes it (Go's own encoder:
    mappings, addresses, its own string table order) reads the same."""
    ours = save(tmp_path, "ours.pb.gz", labelled())
    theirs = tmp_path / "go.pb.gz"
    theirs.write_bytes(go_pprof_files([ours], "-proto", text=False))
    for command in READERS:
        status, _, err = run(capsys, command[0], theirs, *command[1:])
        assert (status, err) == (0, ""), command
    assert run(capsys, "collapsed", theirs)[1] == run(capsys, "collapsed", ours)[1]
    assert (
        run(capsys, "top", theirs)[1].split("Type:")[1]
        == run(capsys, "top", ours)[1].split("Type:")[1]
    )


def test_broken_profiles_through_every_command(tmp_path: Path) -> None:
    """FUZZ_CASES damaged profiles (fuzz_pprof's mutations of a pprof
    file, and of a pstats one now and then), each through every command
    that reads profiles: a right answer or one line naming the file, never
    a traceback, a hang or another status."""
    proc = run_python(
        [os.path.join(SCRIPTS, "fuzz_commands.py"), str(FUZZ_CASES), "1", str(tmp_path)],
        cwd=SCRIPTS,
        env=samprof_env(),
        timeout=FUZZ_CASES / 50 + 60,
    )
    assert proc.returncode == 0, describe(proc)
    result = json.loads(proc.stdout.decode().splitlines()[-1])
    assert result["failures"] == [], json.dumps(result["failures"], indent=1)
    assert result["runs"] == 11 * FUZZ_CASES
    # Not all refused: some damage leaves a profile the commands can show.
    assert FUZZ_CASES / 100 < result["runs"] - result["error_lines"]
