"""`samprof top` on several profiles: files and directories merged, and
--diff-base, as go tool pprof shows them; and its errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict

import pytest
from support.processes import run_samprof
from support.profiles import cpu_profile as _cpu_profile
from support.profiles import go_pprof_files
from support.profiles import top_table as rows

from samprof.cli import main
from samprof.pprof import Profile, ValueType, diff, merge, read, write
from samprof.report import top

MS = 1_000_000


def cpu_profile(stacks: Dict[str, int]) -> Profile:
    return _cpu_profile(stacks, duration_nanos=1_000_000_000)


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    directory = tmp_path / "fleet"
    directory.mkdir()
    (directory / "web-1.pb.gz").write_bytes(write(cpu_profile({"render;handle;main": 30})))
    (directory / "web-2.pb.gz").write_bytes(
        write(cpu_profile({"render;handle;main": 10, "query;handle;main": 25}))
    )
    (directory / "web-3.pb").write_bytes(
        write(cpu_profile({"query;handle;main": 5, "gc;main": 2}), compress=False)
    )
    (directory / ".hidden").write_bytes(b"not a profile, and skipped")
    (directory / "subdir").mkdir()
    return directory


def _merged(directory: Path) -> Profile:
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    return merge(read(f.read_bytes()) for f in files)


def test_top_of_a_directory_merges_its_profiles(
    profiles: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["top", str(profiles)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == top(_merged(profiles))
    files = [p for p in sorted(profiles.iterdir()) if p.suffix in (".gz", ".pb")]
    assert rows(out) == rows(go_pprof_files(files, "-top"))
    assert rows(out)[0] == ["400ms", "55.56%", "55.56%", "400ms", "55.56%", "render"]


def test_top_of_several_files_and_a_directory(
    profiles: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    extra = tmp_path / "extra.pb.gz"
    extra.write_bytes(write(cpu_profile({"render;handle;main": 100})))
    assert main(["top", str(extra), str(profiles)]) == 0
    out = capsys.readouterr().out
    assert out == top(merge([read(extra.read_bytes()), _merged(profiles)]))
    assert rows(out)[0][0] == "1400ms"


def test_top_diff_base(profiles: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = tmp_path / "base.pb.gz"
    base.write_bytes(write(cpu_profile({"render;handle;main": 50, "query;handle;main": 10})))
    new = profiles / "web-2.pb.gz"
    assert main(["top", str(new), "--diff-base", str(base)]) == 0
    out = capsys.readouterr().out
    assert out == top(diff(read(new.read_bytes()), read(base.read_bytes())))
    assert rows(out) == rows(go_pprof_files([new], "-top", f"-diff_base={base}"))
    # A directory as the base: its profiles merged first.
    assert main(["top", str(new), "--diff-base", str(profiles)]) == 0
    out = capsys.readouterr().out
    assert out == top(diff(read(new.read_bytes()), _merged(profiles)))


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda d: None, "no profiles in directory"),
        (lambda d: (d / "junk.txt").write_text("hello"), "junk.txt is not a valid pprof profile"),
        (
            lambda d: (
                (d / "a.pb.gz").write_bytes(write(cpu_profile({"f": 1}))),
                (d / "b.pb.gz").write_bytes(
                    write(Profile(sample_types=[ValueType("alloc_space", "bytes")]))
                ),
            ),
            r"the profiles are of several kinds: samples/cpu \(1 file\); alloc_space \(1 "
            r"file\); pick one with -i TYPE \(e\.g\. -i cpu\)$",
        ),
        (
            lambda d: (
                (d / "a.pb.gz").write_bytes(write(cpu_profile({"f": 1}))),
                (d / "b.pb.gz").write_bytes(
                    write(
                        Profile(
                            sample_types=[ValueType("samples", "count"), ValueType("cpu", "ms")]
                        )
                    )
                ),
            ),
            r"cannot merge .*a\.pb\.gz, .*b\.pb\.gz: profile 1 has sample types "
            r"\[samples/count cpu/ms\], profile 0 has \[samples/count cpu/nanoseconds\]",
        ),
    ],
)
def test_top_directory_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture, setup, message: str
) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    setup(directory)
    assert main(["top", str(directory)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("samprof: error: ")
    assert err.count("\n") == 1
    assert re.search(message, err), err


def test_top_diff_base_errors(
    profiles: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["top", str(profiles), "--diff-base", str(tmp_path / "missing.pb.gz")]) == 1
    assert "cannot read" in capsys.readouterr().err
    wall = tmp_path / "wall.pb.gz"
    wall.write_bytes(write(Profile(sample_types=[ValueType("wall", "nanoseconds")])))
    assert main(["top", str(profiles), "--diff-base", str(wall)]) == 1
    assert "cannot compare with the base" in capsys.readouterr().err


def test_top_of_a_directory_from_the_command_line(profiles: Path) -> None:
    r = run_samprof(["top", "-n", "2", str(profiles)], cwd=profiles)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == top(_merged(profiles), n=2)
