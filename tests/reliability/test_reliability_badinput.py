"""Bad input gets a clear error and changes nothing: the Python API raises
an exception naming what is wrong (and leaves no profile half started), the
command line prints a usage error and exits 2, or says what is wrong with a
file and exits 1, never with a traceback. (tests/cpu/test_cpu_api.py and
tests/cli/test_cli.py cover the common cases; these are the rest.)"""

from __future__ import annotations

import gzip
import signal
from pathlib import Path

import pytest
from support.pprof_proto import ProfileBuilder
from support.processes import run_samprof
from support.workloads import burn_cpu

import samprof
from samprof import _core
from samprof.cli import main

CLASSES = [samprof.CPUProfiler, samprof.WallProfiler]


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    assert not _core.is_running()


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize(
    "hz", [0, -1, 100_001, 10**12, float("inf"), float("nan"), 2.5, "100", None, True, [100]]
)
def test_bad_hz(cls, hz):
    with pytest.raises((TypeError, ValueError), match="hz"):
        cls(hz=hz)


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"max_depth": 0}, "max_depth"),
        ({"max_depth": -1}, "max_depth"),
        ({"max_depth": 4097}, "max_depth"),
        ({"max_depth": 1.5}, "max_depth"),
        ({"max_depth": "64"}, "max_depth"),
        ({"max_depth": True}, "max_depth"),
        ({"max_stacks": 0}, "max_stacks"),
        ({"max_stacks": -5}, "max_stacks"),
        ({"max_stacks": 2.0}, "max_stacks"),
        ({"max_stacks": None}, "max_stacks"),
        ({"engine": None}, "engine"),
        ({"engine": "PERF"}, "engine"),
        ({"signal": "SIGPROF"}, "signal"),
        ({"signal": 27.0}, "signal"),
        ({"signal": None}, "signal"),
    ],
)
def test_bad_arguments(cls, kwargs, word):
    with pytest.raises((TypeError, ValueError), match=word):
        cls(**kwargs)


@pytest.mark.parametrize(
    "sig", [0, -1, 65, 100_000, signal.SIGKILL, signal.SIGSTOP, signal.SIGINT, signal.SIGCHLD]
)
def test_unusable_signal_is_refused(sig):
    # Refused when the profiler is made, before anything is touched.
    with pytest.raises((ValueError, samprof.ProfilerError), match="signal"):
        samprof.CPUProfiler(signal=sig).start()
    assert not _core.is_running()
    # Refusing changed nothing: a good profile runs afterwards.
    samprof.CPUProfiler(hz=1000).profile(0.01)


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("seconds", [-1, -0.001, float("nan"), float("inf"), "1", None, True])
def test_bad_seconds(cls, seconds):
    prof = cls()
    with pytest.raises((TypeError, ValueError), match="seconds"):
        prof.profile(seconds)
    assert not prof.running


@pytest.mark.parametrize("cls", CLASSES)
def test_stop_without_start(cls):
    prof = cls()
    with pytest.raises(samprof.ProfilerError, match="not running"):
        prof.stop()
    assert prof.result is None and prof.stats is None


@pytest.mark.parametrize("first", CLASSES)
@pytest.mark.parametrize("second", CLASSES)
def test_second_start(first, second):
    a = first(hz=1000)
    a.start()
    try:
        with pytest.raises(samprof.ProfilerError, match="already running"):
            a.start()
        with pytest.raises(samprof.ProfilerError, match="already running"):
            second(hz=1000).start()
        assert a.running
    finally:
        data = a.stop()
    assert data[:2] == b"\x1f\x8b"
    # The same object starts again.
    with a:
        burn_cpu(0.01)
    assert a.result is not None


def test_nested_context_manager_on_one_profiler():
    prof = samprof.CPUProfiler(hz=1000)
    with prof:
        with pytest.raises(samprof.ProfilerError, match="already running"):
            with prof:
                pass
        assert prof.running
    assert not prof.running and prof.result is not None


# --------------------------------------------------------------------------
# The command line


@pytest.mark.parametrize(
    "args",
    [
        ["record", "--signal", "bogus", "x.py"],
        ["record", "--signal", "-3", "x.py"],
        ["record", "--signal"],
        ["record", "--mode"],
        ["record", "--engine"],
        ["record", "--hz", "1.5", "x.py"],
        ["record", "--hz", "-5", "x.py"],
        ["record", "--hz", "", "x.py"],
        ["top"],
        ["top", "a.pb.gz", "-n", "-3"],
        ["top", "a.pb.gz", "--diff-base"],
        ["top", "a.pb.gz", "--sample-type"],
        ["top", "--bogus", "a.pb.gz"],
    ],
)
def test_cli_usage_errors(tmp_path, capsys, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "usage:" in err and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())


# Signals that parse but cannot be used: the same usage error, not a
# traceback from deep inside start().
@pytest.mark.parametrize("sig", ["9", "0", "99999", "SIGSEGV", "SIGINT", "SIGRTMIN+100"])
def test_cli_unusable_signal(tmp_path, sig):
    script = tmp_path / "x.py"
    script.write_text("print('ran')\n")
    r = run_samprof(["record", "--signal", sig, "-o", "p.pb.gz", str(script)], cwd=tmp_path)
    err = r.stderr.decode(errors="replace")
    assert "Traceback" not in err, err
    assert r.returncode == 2, (r.returncode, err)
    assert "usage:" in err and "signal" in err, err
    assert r.stdout == b""
    assert not (tmp_path / "p.pb.gz").exists()


def _bad_profiles(tmp_path: Path):
    def built(edit):
        b = ProfileBuilder()
        main_loc = b.location(b.function("main", "app.py"), line=3)
        b.sample([main_loc], [1, 10_000_000])
        edit(b.msg)
        return b.encode()

    def bad_string_index(msg):
        msg.function[0].name = 999

    def dangling_location(msg):
        msg.sample[0].location_id.append(77)

    def too_few_values(msg):
        del msg.sample[0].value[1:]

    def duplicate_function(msg):
        f = msg.function.add()
        f.CopyFrom(msg.function[0])

    kinds = {
        "gzipped garbage": gzip.compress(bytes(range(256)) * 8),
        "gzipped text": gzip.compress(b"this is not a profile\n" * 10),
        "gzipped nothing": gzip.compress(b""),
        "zeros": bytes(4096),
        "overlong varint": b"\x08" + b"\xff" * 11,
        "bad string index": built(bad_string_index),
        "dangling location": built(dangling_location),
        "too few values": built(too_few_values),
        "duplicate function id": built(duplicate_function),
    }
    paths = {}
    for kind, data in kinds.items():
        path = tmp_path / (kind.replace(" ", "_") + ".pb.gz")
        path.write_bytes(data)
        paths[kind] = path
    return paths


def test_top_rejects_malformed_profiles(tmp_path, capsys):
    for kind, path in _bad_profiles(tmp_path).items():
        assert main(["top", str(path)]) == 1, kind
        out, err = capsys.readouterr()
        assert out == "", kind
        assert err.startswith("samprof: error: ") and err.count("\n") == 1, (kind, err)
        assert str(path) in err, (kind, err)
