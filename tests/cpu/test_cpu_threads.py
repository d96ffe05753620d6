"""Which threads get CPU samples: blocked threads none, threads without a
Python thread state a visible pseudo-frame, threads started before and
after profiling began all of them."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from support.measure import measure, within, within_ratio
from support.profiles import check_profile
from support.workloads import burn_python_for, hash_for

import samprof


@pytest.mark.accuracy
def test_blocked_threads_get_no_cpu_samples():
    """Blocked threads get a sample or two at most (waking up costs a few
    microseconds of CPU). The burning main thread's CPU in the profile is
    compared with its own thread_time, within 10%: its sample count is not the
    measure, as the perf engine cannot fire during system calls and weighs the
    next sample instead. Spread measured by `make spread` (20 first attempts
    on Python 3.13, 2-core VM): |error| min/median/max 0.00084%/0.0079%/0.38%,
    at most 4% of the tolerance (20 comparisons).
    """

    def attempt(scale):
        a, b = socket.socketpair()
        ready = threading.Barrier(3)

        def sleeper():
            ready.wait()
            time.sleep(1.0 * scale)

        def reader():
            ready.wait()
            a.settimeout(5)
            a.recv(1)

        ts = [
            threading.Thread(target=sleeper, name="sleeper"),
            threading.Thread(target=reader, name="reader"),
        ]
        for t in ts:
            t.start()
        with samprof.CPUProfiler(hz=1000) as prof:
            ready.wait()
            burned = burn_python_for(0.8 * scale)
            b.send(b"x")
            for t in ts:
                t.join()
        a.close()
        b.close()
        view = check_profile(prof.result)
        by_thread = view.by_label("thread_name", "samples")
        assert by_thread.get("sleeper", 0) <= 2, by_thread
        assert by_thread.get("reader", 0) <= 2, by_thread
        main_cpu = view.by_label("thread_name", "cpu").get("MainThread", 0) / 1e9
        within_ratio(main_cpu, burned, 0.1, "main thread CPU, s", by_thread)

    measure(attempt)


def test_native_thread_without_python_state(native_lib):
    import ctypes

    native_lib.burn_in_native_thread.argtypes = [ctypes.c_double]
    with samprof.CPUProfiler(hz=1000) as prof:
        assert native_lib.burn_in_native_thread(0.5) == 0
    view = check_profile(prof.result)
    native = view.by_function("cpu").get("<native thread>", 0)
    assert native >= 0.4e9, view.by_function("cpu")


@pytest.mark.accuracy
def test_threads_started_before_and_after_start():
    """Tolerance 10% + 10 ms of each thread's CPU. Spread measured by `make
    spread` (20 first attempts on Python 3.13, 2-core VM): |error|
    min/median/max 7.6e-05/0.00055/0.0016, at most 3% of the tolerance (40
    comparisons).
    """

    def attempt(scale):
        go = threading.Event()
        cpu = {}

        def worker(name):
            go.wait()
            cpu[name] = hash_for(0.4 * scale)

        before = threading.Thread(target=worker, args=("before",), name="before")
        before.start()
        with samprof.CPUProfiler(hz=1000) as prof:
            after = threading.Thread(target=worker, args=("after",), name="after")
            after.start()
            go.set()
            before.join()
            after.join()
        view = check_profile(prof.result)
        by_thread = view.by_label("thread_name", "cpu")
        for name in ("before", "after"):
            got = by_thread.get(name, 0) / 1e9
            within(got, cpu[name], 0.1 * cpu[name] + 0.01, f"{name} CPU, s", (by_thread, cpu))

    measure(attempt)
