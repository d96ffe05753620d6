"""Idle threads in wall mode: a thread that stands where it waited has its
time added up and written once (wall.c, "Idle threads"). Nothing of it may
be lost across parts of a profile or at stop, a thread that moves between
waits at different depths is credited where it waited, and time a thread
spends on CPU outside the GIL, its stack unchanged, is not counted twice."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from support import SANITIZED
from support.measure import at_least, measure, within, within_ratio
from support.profiles import check_profile

import samprof


def _thread_wall(view, name, fn=None):
    """Wall seconds of the thread called name (on stacks through fn)."""
    total = 0
    for frames, labels, values in view.samples():
        if labels.get("thread_name") != name:
            continue
        if fn is not None and not any(f[0].endswith(fn) for f in frames):
            continue
        total += values[1]
    return total / 1e9


@pytest.mark.skipif(SANITIZED, reason="timing accuracy is not meaningful under ASan")
@pytest.mark.accuracy
def test_idle_threads_keep_their_whole_time_across_parts():
    """40 threads wait on an Event through two cuts and the stop. Each one's
    wall time in the parts together matches the time it measured itself
    waiting, within 5%, and in the middle part (all of which it spent
    waiting) that part's duration, within 1.5 periods (a part holds whole
    ticks: at half length, 15 ms is one tick in 10): time added up is
    written in the part it belongs to."""

    def attempt(scale):
        seconds = 0.9 * scale
        go, done = threading.Event(), threading.Event()
        waited = {}

        def idle(i):
            go.wait()
            t0 = time.monotonic()
            done.wait()
            waited[i] = time.monotonic() - t0

        threads = [threading.Thread(target=idle, args=(i,), name=f"idle{i}") for i in range(40)]
        for t in threads:
            t.start()
        prof = samprof.WallProfiler(hz=100)
        prof.start()
        go.set()
        parts = []
        for _ in range(2):
            time.sleep(seconds / 3)
            parts.append(prof.cut())
        time.sleep(seconds / 3)
        done.set()
        for t in threads:
            t.join()
        parts.append(prof.stop())
        assert prof.stats.wall["deferred"] > 0, prof.stats
        views = [check_profile(p) for p in parts]
        middle = views[1].msg.duration_nanos / 1e9
        for i in range(40):
            got = sum(_thread_wall(v, f"idle{i}", "idle") for v in views)
            within_ratio(got, waited[i], 0.05, f"idle{i} wall seconds", waited[i])
            got = _thread_wall(views[1], f"idle{i}", "idle")
            within(got, middle, 0.015, f"idle{i} wall seconds in the middle part", middle)

    measure(attempt)


def _wait_shallow(ev, seconds):
    ev.wait(seconds)


def _wait_deep(ev, seconds):
    _wait_shallow_again(ev, seconds)


def _wait_shallow_again(ev, seconds):
    ev.wait(seconds)


@pytest.mark.skipif(SANITIZED, reason="timing accuracy is not meaningful under ASan")
@pytest.mark.accuracy
def test_a_thread_moving_between_waits_is_credited_where_it_waited():
    """A thread waits 30 ms at one depth, then 70 ms one frame deeper, in
    turn: the two get 30% and 70% of its wall time, within 6 pp (their
    true shares measured by the thread)."""

    def attempt(scale):
        rounds = int(12 * scale)
        ev = threading.Event()
        took = {"shallow": 0.0, "deep": 0.0}

        def worker():
            for _ in range(rounds):
                t0 = time.monotonic()
                _wait_shallow(ev, 0.03)
                t1 = time.monotonic()
                _wait_deep(ev, 0.07)
                took["shallow"] += t1 - t0
                took["deep"] += time.monotonic() - t1

        t = threading.Thread(target=worker, name="mover")
        with samprof.WallProfiler(hz=100) as prof:
            t.start()
            t.join()
        view = check_profile(prof.result)
        deep = _thread_wall(view, "mover", "_wait_shallow_again")
        shallow = _thread_wall(view, "mover", "_wait_shallow")
        true_deep = took["deep"] / (took["deep"] + took["shallow"])
        within(100 * deep / (deep + shallow), 100 * true_deep, 6, "deep wait's share, %", took)

    measure(attempt)


@pytest.mark.skipif(SANITIZED, reason="timing accuracy is not meaningful under ASan")
@pytest.mark.accuracy
def test_cpu_outside_the_gil_with_an_unchanged_stack_is_counted_once():
    """A thread hashes a large buffer (hashlib releases the GIL), its stack
    the same at every tick: its wall time matches the time it measured
    within 10%, and at least 80% of it is on CPU."""

    def attempt(scale):
        data = b"x" * (64 << 20)
        took = []

        def hasher():
            t0 = time.monotonic()
            end = t0 + 1.0 * scale
            h = hashlib.sha256()
            while time.monotonic() < end:
                h.update(data)
            took.append(time.monotonic() - t0)

        t = threading.Thread(target=hasher, name="hasher")
        with samprof.WallProfiler(hz=100) as prof:
            t.start()
            t.join()
        view = check_profile(prof.result)
        on = off = 0
        for _, labels, values in view.samples():
            if labels.get("thread_name") == "hasher":
                if labels.get("thread_state") == "on-cpu":
                    on += values[1]
                else:
                    off += values[1]
        within_ratio((on + off) / 1e9, took[0], 0.1, "hasher wall seconds", (on, off, took))
        at_least(on / max(1, on + off), 0.8, "hasher on-CPU share", (on, off))

    measure(attempt)
