"""valgrind memcheck over a short profiling session (PYTHONMALLOC=malloc so
every allocation is seen). CPython itself makes memcheck report a few
things; this fails only on error records with a frame in samprof's
extension (the _samprof module or a file under src/samprof/_c), in the
error's stack or in the stack that allocated the memory involved."""

from __future__ import annotations

import os
import shutil
import xml.etree.ElementTree as ET

import pytest
from support import SANITIZED, TESTS
from support.processes import child_env, describe, run_script

# The core's frame walk comes in three versions: 3.9-3.10, 3.11-3.12 and
# 3.13. memcheck runs on the oldest and the newest Python, and the
# sanitizer build (3.11) covers the third (tests/support/scope.py).
pytestmark = pytest.mark.bounds

SUPPRESSIONS = os.path.join(TESTS, "valgrind-python.supp")


def _is_samprof_frame(frame: ET.Element) -> bool:
    obj = frame.findtext("obj") or ""
    directory = frame.findtext("dir") or ""
    return "_samprof" in os.path.basename(obj) or "samprof/_c" in directory.replace(os.sep, "/")


def _describe(error: ET.Element) -> str:
    lines = [f"{error.findtext('kind')}: {error.findtext('what') or error.findtext('xwhat/text')}"]
    for stack in error.findall("stack"):
        lines.append("  stack:")
        for frame in stack.findall("frame")[:14]:
            where = frame.findtext("file") or os.path.basename(frame.findtext("obj") or "?")
            line = frame.findtext("line") or ""
            lines.append(f"    {frame.findtext('fn') or frame.findtext('ip')} ({where}:{line})")
    for aux in error.findall("auxwhat"):
        lines.append(f"  {aux.text}")
    return "\n".join(lines)


@pytest.mark.skipif(SANITIZED, reason="valgrind cannot run an AddressSanitizer build")
def test_memcheck_finds_nothing_in_samprof(tmp_path):
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    xml_out = tmp_path / "memcheck.xml"
    env = child_env({"PYTHONMALLOC": "malloc"})
    env.pop("LD_PRELOAD", None)
    memcheck = [
        valgrind,
        "--tool=memcheck",
        "--error-limit=no",
        "--track-origins=yes",
        "--leak-check=full",
        "--show-leak-kinds=definite",
        "--errors-for-leak-kinds=definite",
        "--num-callers=30",
        f"--suppressions={SUPPRESSIONS}",
        "--xml=yes",
        f"--xml-file={xml_out}",
    ]
    proc = run_script("valgrind_session.py", timeout=600, env=env, check=False, prefix=memcheck)
    assert proc.returncode == 0, describe(proc)
    assert "CPUProfiler" in proc.stdout and "WallProfiler" in proc.stdout, describe(proc)
    root = ET.parse(xml_out).getroot()
    ours = [
        error
        for error in root.iter("error")
        if any(
            _is_samprof_frame(f) for stack in error.findall("stack") for f in stack.iter("frame")
        )
    ]
    assert not ours, "memcheck errors in samprof:\n\n" + "\n\n".join(_describe(e) for e in ours)
