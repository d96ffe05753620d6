"""Child python processes: run_script (tests/scripts/*.py), run_samprof
(`python -m samprof`) and run_python, each bounded by a timeout; the
environment they get; and what reads their output.

A workload that might crash the interpreter runs in a child process, so that
a crash fails one test with the child's stderr (sanitizer report,
faulthandler traceback) instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from support import SCRIPTS, TESTS

# Lines that only appear when something went badly wrong in a child.
_CRASH_MARKERS = (
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "AddressSanitizer:DEADLYSIGNAL",
    "runtime error:",  # UBSan
    "Fatal Python error",
    "Segmentation fault",
    "Aborted",
)


def _package_parent() -> str:
    """The directory that holds the samprof package the tests import (an
    in-place build or an installed one)."""
    import samprof

    return os.path.dirname(os.path.dirname(os.path.abspath(samprof.__file__)))


def _with_pythonpath(env: Dict[str, str], *dirs: str) -> Dict[str, str]:
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*dirs, env.get("PYTHONPATH")]))
    return env


def samprof_env() -> Dict[str, str]:
    """This environment, but a child python imports the same samprof as the
    tests. What `samprof` on the command line sees (run_samprof)."""
    return _with_pythonpath(dict(os.environ), _package_parent())


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment for a child python that runs a test script: it
    imports the same samprof as the tests and, from tests/, ``support``;
    it keeps the sanitizer settings (LD_PRELOAD, ASAN_OPTIONS, PYTHONMALLOC)
    and has faulthandler on."""
    env = _with_pythonpath(dict(os.environ), _package_parent(), TESTS)
    env["PYTHONFAULTHANDLER"] = "1"
    env.pop("PYTHONWARNINGS", None)
    if extra:
        env.update(extra)
    return env


def crash_report(text: str) -> Optional[str]:
    """The first crash marker found in a child's output, with what follows
    it, or None."""
    for marker in _CRASH_MARKERS:
        i = text.find(marker)
        if i >= 0:
            return text[max(0, i - 200) : i + 4000]
    return None


def describe(proc: subprocess.CompletedProcess) -> str:
    return (
        f"exit status {proc.returncode}\n"
        f"--- stdout (tail)\n{_tail(proc.stdout)}\n"
        f"--- stderr (tail)\n{_tail(proc.stderr)}"
    )


def _tail(text: Optional[str], n: int = 6000) -> str:
    if not text:
        return ""
    return text if len(text) <= n else "..." + text[-n:]


def run_script(
    name: str,
    *args: str,
    timeout: float = 120,
    env: Optional[Dict[str, str]] = None,
    check: bool = True,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    """Runs tests/scripts/NAME with this python (after the command prefix,
    such as valgrind and its options, if given); text output, stdin empty,
    environment child_env() unless env. With check, fails the test (with the
    child's output) unless it exited 0 and wrote no crash report. A child
    still running after timeout seconds is killed and fails the test."""
    cmd = [*prefix, sys.executable, os.path.join(SCRIPTS, name), *args]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env or child_env(),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        raise AssertionError(
            f"{name} {' '.join(args)} hung (no exit after {timeout}s)\n"
            f"--- stdout (tail)\n{_tail(out)}\n--- stderr (tail)\n{_tail(err)}"
        ) from None
    if check:
        report = crash_report(proc.stderr)
        assert report is None, f"{name} {' '.join(args)} crashed:\n{report}\n{describe(proc)}"
        assert proc.returncode == 0, f"{name} {' '.join(args)} failed: {describe(proc)}"
    return proc


def run_python(
    args: List[str],
    cwd: Union[str, Path],
    input: Optional[bytes] = None,
    timeout: float = 60,
    env: Optional[Dict[str, str]] = None,
    check: bool = False,
) -> subprocess.CompletedProcess:
    """`python ARGS` (this python) in cwd, with input on stdin (empty if
    None); stdout and stderr as bytes. env defaults to this environment
    unchanged. check raises CalledProcessError on a non-zero exit status;
    a child still running after timeout seconds raises TimeoutExpired."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=str(cwd),
        input=input if input is not None else b"",
        capture_output=True,
        env=env,
        timeout=timeout,
        check=check,
    )


def run_samprof(
    args: List[str], cwd: Union[str, Path], input: Optional[bytes] = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """`python -m samprof ARGS` in cwd, importing the tests' samprof
    (samprof_env); stdout and stderr as bytes."""
    return run_python(["-m", "samprof", *args], cwd, input, timeout, env=samprof_env())


def last_json(stdout: str) -> dict:
    """The last line of stdout that is a JSON object: what a script reports."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON result in the child's output:\n{_tail(stdout)}")
