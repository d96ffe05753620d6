"""CPU burners, one family for every test and test script.

burn_python_for, hash_for and burn_cpu run until a span of this thread's
CPU time (time.thread_time) is spent and return the CPU they measured;
spin runs for a span of wall time (time.monotonic), on CPU;
hold_gil_for makes one C call that holds the GIL for a span of CPU.
"""

from __future__ import annotations

import hashlib
import itertools
import time

_BUF = b"\x5a" * (1 << 20)


def spin_python(n: int) -> int:
    """n iterations of Python bytecode: a unit of work with a known name."""
    s = 0
    for i in range(n):
        s += i * i
    return s


def burn_python_for(seconds: float, fn=spin_python) -> float:
    """Runs fn(2000) until `seconds` of this thread's CPU are spent.
    Returns the thread CPU time measured around it."""
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        fn(2000)
    return time.thread_time() - t0


def hash_for(seconds: float) -> float:
    """Hashes 1 MiB buffers (the GIL is released inside hashlib) for
    `seconds` of thread CPU. Returns the measured thread CPU."""
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        hashlib.sha256(_BUF).digest()
    return time.thread_time() - t0


def hold_gil_for(seconds: float) -> float:
    """One C call that holds the GIL for about `seconds` of this thread's
    CPU and allocates nothing (summing a repeated int), sized by a short
    run first. Returns the thread CPU time of the whole function."""
    t0 = time.thread_time()
    sum(itertools.repeat(1, 10**6))
    per_item = max(time.thread_time() - t0, 1e-4) / 10**6
    sum(itertools.repeat(1, int(max(seconds - (time.thread_time() - t0), 0) / per_item)))
    return time.thread_time() - t0


def burn_cpu(seconds: float) -> float:
    """Runs Python bytecode for `seconds` of this thread's CPU time, in this
    one frame, reading the clock every 100 additions (fine enough for
    spans of a few hundred microseconds); returns the CPU time it took
    (>= seconds)."""
    start = time.thread_time()
    n = 0
    while time.thread_time() - start < seconds:
        for i in range(100):
            n += i
    return time.thread_time() - start


def spin(seconds: float) -> int:
    """Runs Python bytecode for `seconds` of wall time."""
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i in range(200):
            n += i
    return n
