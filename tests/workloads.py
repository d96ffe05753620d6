"""CPU-burning functions whose cost tests measure with time.thread_time."""

from __future__ import annotations

import hashlib
import time

_BUF = b"\x5a" * (1 << 20)


def spin_python(n: int) -> int:
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
