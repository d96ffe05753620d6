"""Time in CPython's cyclic garbage collector shows as <gc> on top of the
stack that triggered it."""

from __future__ import annotations

import gc
import time

import pytest
from conftest import SANITIZED, check_profile
from workloads import spin_python

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
@pytest.mark.parametrize("mode", ["cpu", "wall"])
def test_gc_share_matches_gc_callbacks(mode):
    in_gc = [0.0]
    started = [0.0]
    clock = time.thread_time if mode == "cpu" else time.monotonic

    def timer(phase, info):
        if phase == "start":
            started[0] = clock()
        else:
            in_gc[0] += clock() - started[0]

    gc.disable()
    gc.callbacks.insert(0, timer)
    cls = samprof.CPUProfiler if mode == "cpu" else samprof.WallProfiler
    try:
        t0 = clock()
        with cls(hz=1000) as prof:
            for _ in range(15):
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
    got = 100 * gc_value / everything
    want = 100 * in_gc[0] / total
    assert want > 5, want  # the workload must spend real time in gc
    assert abs(got - want) <= 3, (got, want)
    # <gc> sits on top of the stack that triggered it.
    for frames, _, _ in view.samples():
        names = [f[0] for f in frames]
        if "<gc>" in names:
            assert names[0] == "<gc>"
            assert "collect_garbage" in names or "make_garbage" in names, names
