"""Shared by the reliability tests (tests/test_reliability_*.py) and the
scripts they run in subprocesses (tests/scripts/*.py).

A workload that might crash the interpreter runs in a subprocess, so that a
crash fails one test with the child's stderr (sanitizer report, faulthandler
traceback) instead of killing pytest.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Dict, Optional

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(SCRIPTS)
NATIVE = os.path.join(TESTS, "native")

SANITIZED = os.environ.get("SAMPROF_SANITIZED") == "1"

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


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment for a child python: it imports the same samprof as
    the tests (an in-place build or an installed one) and keeps the
    sanitizer settings (LD_PRELOAD, ASAN_OPTIONS, PYTHONMALLOC)."""
    import samprof

    parent = os.path.dirname(os.path.dirname(os.path.abspath(samprof.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [parent, SCRIPTS, env.get("PYTHONPATH")]))
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
) -> subprocess.CompletedProcess:
    """Runs tests/scripts/NAME with this python; text output. With check,
    fails the test (with the child's output) unless it exited 0 and wrote
    no crash report."""
    cmd = [sys.executable, os.path.join(SCRIPTS, name), *args]
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


def last_json(stdout: str) -> dict:
    """The last line of stdout that is a JSON object: what a script reports."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON result in the child's output:\n{_tail(stdout)}")


_native_cache: Dict[str, str] = {}


def native_library(source: str = "reliability.c") -> ctypes.CDLL:
    """tests/native/SOURCE compiled into a shared library (once per
    process) and loaded."""
    path = _native_cache.get(source)
    if path is None:
        out_dir = tempfile.mkdtemp(prefix="samprof-native-")
        path = os.path.join(out_dir, os.path.splitext(source)[0] + ".so")
        subprocess.run(
            [
                "gcc",
                "-O1",
                "-shared",
                "-fPIC",
                "-pthread",
                # Bound at load, as samprof is: the dynamic linker never
                # runs inside a signal handler.
                "-Wl,-z,now",
                "-o",
                path,
                os.path.join(NATIVE, source),
            ],
            check=True,
        )
        _native_cache[source] = path
    return ctypes.CDLL(path)


def rss_kib() -> int:
    """Resident set size of this process, KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def posix_timers() -> int:
    """POSIX timers this process holds (/proc/self/timers lists them)."""
    try:
        with open("/proc/self/timers") as f:
            return sum(1 for line in f if line.startswith("ID:"))
    except OSError:
        return 0


def spin(seconds: float) -> int:
    """Runs Python bytecode for `seconds` of wall time."""
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i in range(200):
            n += i
    return n


def burn_cpu(seconds: float) -> float:
    """Runs Python bytecode for `seconds` of this thread's CPU time; returns
    the CPU time it took (>= seconds)."""
    start = time.thread_time()
    n = 0
    while time.thread_time() - start < seconds:
        for i in range(100):
            n += i
    return time.thread_time() - start


def perf_available() -> bool:
    """Whether the perf-event engine can start here (perf_event_paranoid,
    seccomp and containers can forbid it)."""
    import samprof

    try:
        prof = samprof.CPUProfiler(hz=100, engine="perf")
        prof.start()
    except samprof.ProfilerError:
        return False
    prof.stop()
    return True


# A generated function's name (or file name) in tests/scripts/code_churn.py.
GENERATED = re.compile(r"gen_[a-z]_\d+_\d+")
