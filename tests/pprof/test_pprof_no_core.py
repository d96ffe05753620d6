"""samprof's profile tools where its compiled core is missing, and the
reader under fuzzed input. Both run in child processes bounded in time."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List

import pytest
from support import SCRIPTS
from support.processes import describe, run_python, samprof_env
from support.profiles import go_pprof_files, top_table
from support.workloads import burn_python_for

import samprof
from samprof import pprof
from samprof.pprof import Frame, Profile, ValueType
from samprof.report import top

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds

# How long the fuzz runs (CI: a few seconds per Python; `make fuzz` longer).
FUZZ_SECONDS = float(os.environ.get("SAMPROF_FUZZ_SECONDS", "3"))


def _cpu_profile() -> bytes:
    with samprof.CPUProfiler(hz=500) as prof:
        burn_python_for(0.2)
    assert prof.result is not None
    return prof.result


def test_profile_tools_work_without_the_compiled_core(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "a.pb.gz").write_bytes(_cpu_profile())
    (profiles / "b.pb.gz").write_bytes(_cpu_profile())
    # One written by samprof.pprof, with the same types as the CPU profiles.
    made = Profile(
        sample_types=[ValueType("samples", "count"), ValueType("cpu", "nanoseconds")],
        period_type=ValueType("cpu", "nanoseconds"),
        period=2_000_000,
    )
    made.add_sample([Frame("made_up", "made.py", 1)], [50, 100_000_000], {"route": "/x"})
    (profiles / "c.pb.gz").write_bytes(pprof.write(made))
    base = tmp_path / "base.pb.gz"
    base.write_bytes(_cpu_profile())
    out = tmp_path / "out"
    out.mkdir()

    proc = run_python(
        [os.path.join(SCRIPTS, "pprof_without_core.py"), str(profiles), str(base), str(out)],
        cwd=tmp_path,
        env=samprof_env(),
        timeout=120,
    )
    assert proc.returncode == 0, describe(proc)
    result = json.loads(proc.stdout.decode().splitlines()[-1])

    assert result["core_imported"] is False
    assert "compiled core (samprof._samprof) cannot be imported" in result["profiler_error"]
    assert "pip install" in result["profiler_error"]
    status, _, err = result["record"]
    assert status == 1 and "compiled core" in err
    assert result["round_trip_equal"] is True

    # What the child printed is what this process (with the core) computes,
    # and what go tool pprof shows for the same files.
    files = sorted(profiles.iterdir())
    merged = pprof.merge(pprof.read(f.read_bytes()) for f in files)
    for key in ("top_dir", "top_files"):
        status, text, err = result[key]
        assert status == 0, err
        assert text == top(merged, n=1000)
        assert top_table(text) == top_table(go_pprof_files(files, "-top", "-nodecount=1000"))
    status, text, err = result["top_diff"]
    assert status == 0, err
    theirs = go_pprof_files(files, "-top", "-nodecount=1000", f"-diff_base={base}")
    assert top_table(text) == top_table(theirs)

    # The views need no core either.
    from samprof.views import collapsed, diff_table

    for key in ("collapsed", "speedscope", "diff", "merge"):
        assert result[key][0] == 0, result[key]
    assert result["collapsed"][1] == collapsed(merged)
    assert result["diff"][1] == diff_table(pprof.read(base.read_bytes()), merged)
    assert json.loads((out / "s.speedscope.json").read_text())["profiles"]
    assert pprof.read((out / "cli-merged.pb.gz").read_bytes()) == merged

    # The files the child wrote read the same in go tool pprof.
    def go_top(*paths: Path) -> List[List[str]]:
        return top_table(go_pprof_files(paths, "-top", "-nodecount=1000"))

    assert go_top(out / "merged.pb.gz") == go_top(*files)
    assert go_top(out / "diff.pb.gz") == top_table(theirs)


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzzed_input_is_refused_cleanly(seed: int) -> None:
    """Broken profiles (bytes flipped, truncated, huge varints, indexes out of
    range, damaged gzip) give PprofError or a profile every operation
    handles; never another exception, a hang or a crash."""
    seconds = FUZZ_SECONDS / 2
    proc = run_python(
        [
            os.path.join(
                SCRIPTS,
                "fuzz_pprof.py",
            ),
            str(seconds),
            str(seed),
        ],
        cwd=SCRIPTS,
        env=samprof_env(),
        timeout=seconds + 60,
    )
    assert proc.returncode == 0, describe(proc)
    result = json.loads(proc.stdout.decode().splitlines()[-1])
    assert result["failures"] == [], json.dumps(result["failures"], indent=1)
    # Every kind of damage was tried, many times.
    assert min(result["by_mutation"].values()) >= 50, result["by_mutation"]
