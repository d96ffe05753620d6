"""Stacks that stress the signal handler's own stack and the frame walk.

Usage:
  deep_stacks.py recursion MODE HZ MAX_DEPTH PROFILE_OUT
      50,000 nested Python calls (recursion limit raised; in a thread with a
      large stack, as 3.9 and 3.10 use the C stack for Python calls), the
      innermost burning CPU, sampled at HZ.
  deep_stacks.py small-stacks MODE HZ PROFILE_OUT
      Threads created with threading.stack_size(64 KiB) run Python
      (including some recursion) while samprof samples at HZ.
  deep_stacks.py altstack NATIVE_LIB ENGINE HZ BUDGET PROFILE_OUT
      A thread installs an alternate signal stack (as some libraries do)
      and burns CPU in a signal handler running on it, so samprof's signal
      arrives while the thread executes on that stack: first on a large
      painted one, to measure what each handler uses, then on a small one
      that leaves samprof's handler BUDGET bytes below the deepest nested
      frame of a handler that does nothing.

Each prints one JSON line with the stats and writes the profile.
"""

from __future__ import annotations

import ctypes
import json
import signal
import sys
import threading
import time

from support.workloads import spin

import samprof

DEPTH = 50_000


def profiler(mode: str, hz: int, **kw):
    cls = samprof.CPUProfiler if mode == "cpu" else samprof.WallProfiler
    return cls(hz=hz, **kw)


def deep_recursion_leaf(seconds: float) -> None:
    spin(seconds)


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


def _burn_on_altstack(lib, size: int, nest_signum: int = 0, nest_hz: int = 0) -> dict:
    """Runs the library's handler 10 times on a fresh alternate stack of
    `size` bytes in a new thread; returns how often it ran there and how
    many bytes of the stack were ever written."""
    used = ctypes.c_size_t(0)
    ran = []

    def run() -> None:
        period = 1_000_000_000 // nest_hz if nest_hz else 0
        ran.append(
            lib.rel_burn_on_altstack(
                int(signal.SIGUSR2), size, 0.05, 10, nest_signum, period, ctypes.byref(used)
            )
        )

    t = threading.Thread(target=run, name="altstack")
    t.start()
    t.join()
    return {"ran": ran, "used": used.value}


def altstack(lib_path: str, engine: str, hz: int, budget: int, out: str) -> dict:
    """Measures the alternate stack's use on a large painted stack: by the
    library's handler alone, with a trivial handler nesting on it (the
    control: the kernel's frame for the nested signal), and with samprof's
    signal nesting on it. Then runs samprof again on a stack that holds the
    control's deepest frame plus `budget` bytes, with a guard page below
    it.

    The small stack is sized from the control, not from samprof's own
    measurement: the control's signals come from a high-resolution timer
    and land at the library handler's deepest point every run, while
    samprof's come from CPU-clock timers that fire at kernel ticks (125 in
    the 0.5 s) and missed that point in 12 of 200 ASan runs, by 2,240
    bytes; a stack sized from such a run was 8 bytes short."""
    lib = ctypes.CDLL(lib_path)
    lib.rel_burn_on_altstack.argtypes = [
        ctypes.c_int,
        ctypes.c_size_t,
        ctypes.c_double,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.rel_min_sigstksz.restype = ctypes.c_long
    lib.rel_nested_hits.restype = ctypes.c_long
    page = 4096
    large = 64 * 1024
    alone = _burn_on_altstack(lib, large)
    control = _burn_on_altstack(lib, large, int(signal.SIGRTMIN) + 7, hz)
    prof = samprof.CPUProfiler(hz=hz, engine=engine)
    prof.start()
    with_samprof = _burn_on_altstack(lib, large)
    prof.stop()
    small = (control["used"] + budget + page - 1) // page * page
    prof = samprof.CPUProfiler(hz=hz, engine=engine)
    prof.start()
    on_small = _burn_on_altstack(lib, small)
    data = prof.stop()
    with open(out, "wb") as f:
        f.write(data)
    return {
        "min_sigstksz": lib.rel_min_sigstksz(),
        "alone": alone,
        "control": control,
        "control_hits": lib.rel_nested_hits(),
        "samprof": with_samprof,
        "small_bytes": small,
        "small": on_small,
    }


def main() -> None:
    what = sys.argv[1]
    if what == "recursion":
        result = recursion(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif what == "small-stacks":
        result = small_stacks(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        result = altstack(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
