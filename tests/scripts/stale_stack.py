"""Profiles a thread that calls Python from C all the time with a stale
address left on its stack (tests/native/stale_stack.c), so that signals land
while CPython 3.11 and 3.12 enter a new evaluation frame.

Usage: stale_stack.py LIBRARY MODE HZ SECONDS

Prints one JSON line: the calls made and the profile's stats. A crash (the
signal handler following the stale frame pointer) ends the process with
SIGSEGV before that.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

import samprof


def callee() -> int:
    return 1


def main() -> None:
    library, mode, hz, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    lib = ctypes.PyDLL(library)
    lib.stale_calls.argtypes = [ctypes.py_object, ctypes.c_long]
    lib.stale_calls.restype = ctypes.c_long
    prof = (samprof.WallProfiler if mode == "wall" else samprof.CPUProfiler)(hz=hz)
    prof.start()
    calls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        calls += lib.stale_calls(callee, 20000)
    prof.stop()
    stats = prof.stats
    assert stats is not None
    print(json.dumps({"calls": calls, "samples": stats.samples, "dropped": stats.dropped}))


if __name__ == "__main__":
    main()
