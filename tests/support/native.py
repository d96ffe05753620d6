"""Native code for the tests: tests/native/*.c compiled once per process,
and what the machine allows."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import tempfile
from typing import Dict

from support import NATIVE

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
            timeout=300,
        )
        _native_cache[source] = path
    return ctypes.CDLL(path)


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
