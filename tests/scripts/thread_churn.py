"""Thousands of short-lived threads while samprof samples CPU.

Usage: thread_churn.py NATIVE_LIB ENGINE HZ THREADS BURN_MS AT_ONCE PROFILE_OUT

Starts THREADS threads, AT_ONCE at a time; each burns BURN_MS of its own
CPU time in short_lived_thread_burn() and measures what it burned: a fifth
in Python, the rest in C called through ctypes (the GIL released, so that
AT_ONCE threads burn in parallel, and their frames are read while they are
detached). Writes
the profile to PROFILE_OUT and prints one JSON line with the measured total
and the stats.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import time

import samprof

measured = []
native = None


def short_lived_thread_burn(seconds: float) -> None:
    start = time.thread_time()
    n = 0
    while time.thread_time() - start < seconds / 5:
        for i in range(2000):
            n += i
    native.rel_burn_cpu(seconds * 4 / 5)
    measured.append(time.thread_time() - start)


def main() -> None:
    global native
    native = ctypes.CDLL(sys.argv[1])
    native.rel_burn_cpu.restype = ctypes.c_double
    native.rel_burn_cpu.argtypes = [ctypes.c_double]
    engine, hz, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    burn_s, at_once, out = float(sys.argv[5]) / 1000, int(sys.argv[6]), sys.argv[7]
    prof = samprof.CPUProfiler(hz=hz, engine=engine)
    t0 = time.monotonic()
    prof.start()
    started = 0
    while started < threads:
        batch = [
            threading.Thread(target=short_lived_thread_burn, args=(burn_s,))
            for _ in range(min(at_once, threads - started))
        ]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
        started += len(batch)
    data = prof.stop()
    with open(out, "wb") as f:
        f.write(data)
    stats = prof.stats
    assert stats is not None
    print(
        json.dumps(
            {
                "threads": started,
                "measured_ns": int(sum(measured) * 1e9),
                "finished": len(measured),
                "samples": stats.samples,
                "engine": stats.engine,
                "threads_by_engine": stats.threads_by_engine,
                "dropped": stats.dropped,
                "elapsed_s": time.monotonic() - t0,
            }
        )
    )


if __name__ == "__main__":
    main()
