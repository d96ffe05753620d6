"""The heap hooks under stress: what a sanitizer build must survive.

    python heap_churn.py CYCLES DEPTH

Four threads allocate and free (bytes, lists, dicts, cycles for the GC,
numpy arrays) while the main thread starts and stops a heap profile CYCLES
times, at a small rate so that sampled blocks come and go all the time.
Every other profile counts numpy's array data too (numpy=True), and some
start a short thread that makes arrays under samprof's numpy handler and
ends, leaving arrays that outlive the profile. tracemalloc is
started before some profiles and after others, and stopped while they run
and after they stop, so samprof's hooks are wrapped, unwrapped and
dropped. Halfway, the process forks with the profile running; the child
checks that it starts clean and can profile on its own. Then one profile
of a DEPTH-deep recursion (recursion limit raised, in a thread with a large
stack) checks that deep stacks are cut at max_depth.

Prints one JSON line with what it saw.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
import time
import tracemalloc
import warnings

import numpy as np

import samprof


class Cycle:
    def __init__(self) -> None:
        self.me = self
        self.data = bytearray(300)


BATCHES = []


def worker(stop: threading.Event) -> None:
    keep = []
    batches = 0
    while not stop.is_set():
        batches += 1
        for _ in range(20):
            keep.append(bytearray(2000))
            keep.append([None] * 100)
            keep.append({i: str(i) for i in range(20)})
            keep.append(Cycle())
            keep.append(np.ones(64 + len(keep) % 512))
        if len(keep) > 500:
            del keep[:300]
        # Let the main thread have the GIL between batches: each of its
        # start/stop cycles would otherwise wait a switch interval per
        # thread, again and again.
        time.sleep(0.0005)
    BATCHES.append(batches)


def fork_child_checks() -> None:
    """In the forked child: the parent's profile is not running here, and a
    new one works."""
    status = 0
    try:
        assert not samprof.HeapProfiler().running
        with samprof.HeapProfiler(rate=1024, numpy=True) as prof:
            junk = [bytearray(100) for _ in range(1000)]
            junk += [np.zeros(1000) for _ in range(100)]
            del junk
        assert prof.stats.sampled > 0, prof.stats
        gzip.decompress(prof.result)
    except BaseException as e:  # noqa: BLE001 - reported through the status
        print(f"child failed: {e!r}", file=sys.stderr)
        status = 1
    os._exit(status)


def wait_child(pid: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -9


def recurse(n: int) -> list:
    if n == 0:
        return [bytearray(1000) for _ in range(100)]
    return recurse(n - 1)


def deep(depth: int) -> dict:
    sys.setrecursionlimit(depth + 1000)
    threading.stack_size(1 << 30)
    result = {}

    def run() -> None:
        with samprof.HeapProfiler(rate=1, max_depth=64) as prof:
            kept = recurse(depth)
        result["truncated"] = prof.stats.truncated
        result["kept"] = len(kept)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    threading.stack_size(0)
    return result


SHORT_LIVED = []


def arrays_in_a_thread() -> None:
    """A thread that starts while a profile runs, makes arrays (some kept
    past its end and the profile's) and ends."""

    def run() -> None:
        made = [np.arange(i * 100) for i in range(1, 40)]
        SHORT_LIVED.append(made[::3])

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if len(SHORT_LIVED) > 20:
        del SHORT_LIVED[:10]


def main() -> None:
    cycles = int(sys.argv[1])
    depth = int(sys.argv[2])
    stop = threading.Event()
    threads = [threading.Thread(target=worker, args=(stop,)) for _ in range(4)]
    for t in threads:
        t.start()
    seen = {"left": 0, "lost": 0, "sampled": 0, "numpy": 0, "no_gil": 0, "fork": None}
    try:
        for i in range(cycles):
            phase = i % 10
            if phase == 1:
                tracemalloc.start(1)  # below ours
            prof = samprof.HeapProfiler(rate=4096, numpy=i % 2 == 0)
            prof.start()
            if phase == 3:
                tracemalloc.start(4)  # above ours
            junk = [bytearray(500) for _ in range(50)]
            junk.append(np.empty(1000 + i))
            if phase in (0, 4):
                arrays_in_a_thread()
            if phase == 5 and tracemalloc.is_tracing():
                tracemalloc.stop()  # while ours runs: may drop ours
            if i % 25 == 0:
                gzip.decompress(prof.snapshot())
            if i == cycles // 2:
                pid = os.fork()
                if pid == 0:
                    fork_child_checks()
                seen["fork"] = wait_child(pid, 60)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prof.stop()
            del junk
            seen["left"] += prof.stats.hooks_left
            seen["lost"] += prof.stats.hooks_lost
            seen["sampled"] += prof.stats.sampled
            seen["numpy"] += prof.stats.numpy
            seen["no_gil"] += prof.stats.dropped["numpy_no_gil"]
            if phase in (7, 9) and tracemalloc.is_tracing():
                tracemalloc.stop()
    finally:
        stop.set()
        for t in threads:
            t.join()
    if tracemalloc.is_tracing():
        tracemalloc.stop()
    seen["worker_batches"] = sum(BATCHES)
    seen.update(deep(depth))
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
