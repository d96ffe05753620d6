"""Memory bounds of samprof.

Usage:
  memory_caps.py stacks MODE HZ MAX_STACKS FUNCTIONS PROFILE_OUT
      Runs FUNCTIONS generated functions (each its own distinct stack) under
      a profiler whose stack table holds MAX_STACKS. Wall mode: each
      function sleeps a little (every tick samples it wherever it is). CPU
      mode: each burns a little. Prints the stats and the RSS growth.
  memory_caps.py cycles CYCLES
      Starts and stops CPU and wall profiles CYCLES times while threads run
      (short-lived threads burning CPU, a Python thread waking every
      millisecond), and prints VmRSS,
      open descriptors, threads and POSIX timers after a warm-up and at the
      end.
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys
import threading
import time

from support.native import native_library
from support.procfs import native_threads, open_fds, posix_timers, rss_kib
from support.workloads import burn_cpu

import samprof


def generated_functions(n: int, body: str) -> list:
    src = "\n".join(f"def gen_f_{i}(work):\n    {body}\n" for i in range(n))
    ns: dict = {}
    exec(compile(src, "<generated>", "exec"), ns)
    return [ns[f"gen_f_{i}"] for i in range(n)]


def stacks(mode: str, hz: int, max_stacks: int, functions: int, out: str) -> dict:
    if mode == "wall":
        fns = generated_functions(functions, "work(0.0004)")
        work = time.sleep
        cls = samprof.WallProfiler
    else:
        fns = generated_functions(functions, "work(0.0003)")
        work = burn_cpu
        cls = samprof.CPUProfiler
    gc.collect()
    before = rss_kib()
    prof = cls(hz=hz, max_stacks=max_stacks)
    prof.start()
    for fn in fns:
        fn(work)
    data = prof.stop()
    grown = rss_kib() - before
    with open(out, "wb") as f:
        f.write(data)
    stats = prof.stats
    assert stats is not None
    return {
        "samples": stats.samples,
        "dropped": stats.dropped,
        "engine": stats.engine,
        "rss_grown_kib": grown,
    }


def cycles(n: int) -> dict:
    lib = native_library()
    lib.rel_burn_cpu.restype = ctypes.c_double
    lib.rel_burn_cpu.argtypes = [ctypes.c_double]
    stop = threading.Event()

    def waker() -> None:
        # A Python thread that runs a little every millisecond.
        while not stop.is_set():
            time.sleep(0.001)
            sum(range(200))

    def churner() -> None:
        # Threads that come and go, burning CPU in C (the GIL released, so
        # that they do not slow the cycles down by holding it).
        while not stop.is_set():
            t = threading.Thread(target=lib.rel_burn_cpu, args=(0.001,))
            t.start()
            t.join()
            time.sleep(0.001)

    threads = [threading.Thread(target=f) for f in (waker, churner)]
    for t in threads:
        t.start()
    cpu = samprof.CPUProfiler(hz=1000)
    wall = samprof.WallProfiler(hz=1000)
    warmup = min(500, n // 10)
    base = {}
    # VmRSS every tenth of the cycles after the warm-up: a leak grows with
    # the cycles, a one-off step (an allocator arena, a cached thread
    # stack) does not.
    every = max(1, (n - warmup) // 10)
    rss = []
    for i in range(n):
        if i == warmup:
            gc.collect()
            base = snapshot()
        if i >= warmup and (i - warmup) % every == 0:
            rss.append(rss_kib())
        prof = cpu if i % 2 == 0 else wall
        prof.start()
        if i % 100 == 0:
            # Now and then a profile with samples in it.
            burn_cpu(0.005)
        prof.stop()
    gc.collect()
    end = snapshot()
    rss.append(end["rss_kib"])
    stop.set()
    for t in threads:
        t.join()
    return {"cycles": n, "warmup": warmup, "base": base, "end": end, "rss_kib": rss}


def snapshot() -> dict:
    return {
        "rss_kib": rss_kib(),
        "fds": open_fds(),
        "threads": native_threads(),
        "timers": posix_timers(),
    }


def main() -> None:
    if sys.argv[1] == "stacks":
        result = stacks(
            sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
        )
    else:
        result = cycles(int(sys.argv[2]))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
