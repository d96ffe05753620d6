"""Stacks that stress the signal handler's own stack and the frame walk.

Usage:
  deep_stacks.py recursion MODE HZ MAX_DEPTH PROFILE_OUT
      50,000 nested Python calls (recursion limit raised; in a thread with a
      large stack, as 3.9 and 3.10 use the C stack for Python calls), the
      innermost burning CPU, sampled at HZ.
  deep_stacks.py small-stacks MODE HZ PROFILE_OUT
      Threads created with threading.stack_size(64 KiB) run Python
      (including some recursion) while samprof samples at HZ.
  deep_stacks.py altstack NATIVE_LIB HZ PROFILE_OUT
      A thread installs a small alternate signal stack (as some libraries
      do) and burns CPU in a signal handler running on it, so samprof's
      signal arrives while the thread executes on that small stack.

Each prints one JSON line with the stats and writes the profile.
"""

from __future__ import annotations

import ctypes
import json
import signal
import sys
import threading
import time

import reliability_helpers as rh

import samprof

DEPTH = 50_000


def profiler(mode: str, hz: int, **kw):
    cls = samprof.CPUProfiler if mode == "cpu" else samprof.WallProfiler
    return cls(hz=hz, **kw)


def deep_recursion_leaf(seconds: float) -> None:
    rh.spin(seconds)


def deep_recursion(n: int, seconds: float) -> int:
    if n == 0:
        deep_recursion_leaf(seconds)
        return 0
    return deep_recursion(n - 1, seconds) + 1


def recursion(mode: str, hz: int, max_depth: int, out: str) -> dict:
    sys.setrecursionlimit(DEPTH + 1000)
    # 3.9 and 3.10 spend C stack on every Python call (a few hundred bytes
    # to a few KiB, more in sanitizer builds): give the thread plenty.
    threading.stack_size(1 << 30)
    result = {}

    def run() -> None:
        result["depth"] = deep_recursion(DEPTH, 0.6)

    prof = profiler(mode, hz, max_depth=max_depth)
    prof.start()
    t = threading.Thread(target=run, name="deep")
    t.start()
    t.join()
    data = prof.stop()
    threading.stack_size(0)
    with open(out, "wb") as f:
        f.write(data)
    return {"depth": result.get("depth"), "truncated": prof.stats.truncated}


def small_stack_work(depth: int, seconds: float) -> int:
    if depth > 0:
        return small_stack_work(depth - 1, seconds) + 1
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += sum(i * i for i in range(50))
    return 0


def small_stacks(mode: str, hz: int, out: str) -> dict:
    threading.stack_size(64 * 1024)
    done = []

    def run() -> None:
        done.append(small_stack_work(20, 0.5))

    prof = profiler(mode, hz)
    prof.start()
    threads = [threading.Thread(target=run, name=f"small-{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = prof.stop()
    threading.stack_size(0)
    with open(out, "wb") as f:
        f.write(data)
    return {"finished": len(done)}


def altstack(lib_path: str, hz: int, out: str) -> dict:
    lib = ctypes.CDLL(lib_path)
    lib.rel_burn_on_altstack.argtypes = [
        ctypes.c_int,
        ctypes.c_size_t,
        ctypes.c_double,
        ctypes.c_int,
    ]
    lib.rel_min_sigstksz.restype = ctypes.c_long
    page = 4096
    # The kernel's minimum for one signal frame (AT_MINSIGSTKSZ), rounded
    # up to pages, plus one page: room for the library's own handler frame
    # and one more (samprof's) nested in it, with little to spare.
    size = (lib.rel_min_sigstksz() + page - 1) // page * page + page
    ran = []

    def run() -> None:
        ran.append(lib.rel_burn_on_altstack(int(signal.SIGUSR2), size, 0.05, 10))

    prof = samprof.CPUProfiler(hz=hz)
    prof.start()
    t = threading.Thread(target=run, name="altstack")
    t.start()
    t.join()
    data = prof.stop()
    with open(out, "wb") as f:
        f.write(data)
    return {"ran_on_altstack": ran, "altstack_bytes": size}


def main() -> None:
    what = sys.argv[1]
    if what == "recursion":
        result = recursion(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif what == "small-stacks":
        result = small_stacks(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        result = altstack(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
