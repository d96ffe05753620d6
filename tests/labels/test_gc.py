"""Time in CPython's cyclic garbage collector shows as <gc> on top of the
stack that triggered it."""

from __future__ import annotations

import gc
import time

import pytest
from support import SANITIZED
from support.measure import measure, within
from support.profiles import check_profile
from support.workloads import spin_python

import samprof


class Node:
    def __init__(self):
        self.ref = self


def make_garbage(n):
    for _ in range(n):
        a, b = Node(), Node()
        a.other, b.other = b, a


def collect_garbage():
    gc.collect()


@pytest.mark.skipif(SANITIZED, reason="timing accuracy is not meaningful under ASan")
@pytest.mark.accuracy
@pytest.mark.parametrize("mode", ["cpu", "wall"])
def test_gc_share_matches_gc_callbacks(mode):
    """The truth is the time between gc.callbacks' start and stop phases,
    measured by a callback that runs before samprof's. Tolerance 3 pp.
    Spread measured by `make spread` (20 first attempts on Python 3.13,
    2-core VM), signed error min/median/max: cpu -0.59/+0.02/+0.77 pp,
    wall -0.67/+0.06/+0.81 pp (3.9, 8 runs: within +/-0.5 pp).

    This test found two biases, not noise, both now fixed:
    - With the perf engine <gc> came out 2-3 pp above the truth every
      time, with POSIX timers not. A perf sample carries the CPU time since
      the previous one, and the allocation burst before each collection
      ends in kernel time (page faults) that the user-mode-only event
      cannot interrupt, so that carry went to the first sample inside the
      collection. The sampler settles the carry at GC boundaries
      (sampler.c, sampler_settle_perf_carry).
    - Wall mode stayed +1.3 to +3.1 pp above: a collection that ended
      before the wall sampler's first tick had seen its thread was charged
      twice, by the perf signals and by the wall sampler (wall.c,
      wall_gc_end).
    """
    clock = time.thread_time if mode == "cpu" else time.monotonic
    cls = samprof.CPUProfiler if mode == "cpu" else samprof.WallProfiler

    def attempt(scale):
        in_gc = [0.0]
        started = [0.0]

        def timer(phase, info):
            if phase == "start":
                started[0] = clock()
            else:
                in_gc[0] += clock() - started[0]

        gc.disable()
        gc.callbacks.insert(0, timer)
        try:
            with cls(hz=1000) as prof:
                # The truth's span is the profile's: start and stop are
                # outside it.
                t0 = clock()
                for _ in range(max(1, round(15 * scale))):
                    make_garbage(30000)
                    collect_garbage()
                    spin_python(100000)
                total = clock() - t0
        finally:
            gc.callbacks.remove(timer)
            gc.enable()
        view = check_profile(prof.result)
        vt = "cpu" if mode == "cpu" else "wall"
        i = view.value_index(vt)
        gc_value = everything = 0
        for frames, labels, values in view.samples():
            # Other threads (in wall mode, idle ones) are not part of the truth.
            if labels.get("thread_name") != "MainThread":
                continue
            everything += values[i]
            if frames and frames[0][0] == "<gc>":
                gc_value += values[i]
        # <gc> sits on top of the stack that triggered it.
        for frames, _, _ in view.samples():
            names = [f[0] for f in frames]
            if "<gc>" in names:
                assert names[0] == "<gc>"
                assert "collect_garbage" in names or "make_garbage" in names, names
        got = 100 * gc_value / everything
        want = 100 * in_gc[0] / total
        assert want > 5, want  # the workload must spend real time in gc
        within(got, want, 3, "<gc> share of the main thread, pp")

    measure(attempt)
