"""Which threads get CPU samples: blocked threads none, threads without a
Python thread state a visible pseudo-frame, threads started before and
after profiling began all of them."""

from __future__ import annotations

import socket
import threading
import time

from conftest import check_profile
from workloads import burn_python_for, hash_for

import samprof


def test_blocked_threads_get_no_cpu_samples():
    a, b = socket.socketpair()
    ready = threading.Barrier(3)

    def sleeper():
        ready.wait()
        time.sleep(1.0)

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
        burn_python_for(0.8)
        b.send(b"x")
        for t in ts:
            t.join()
    a.close()
    b.close()
    view = check_profile(prof.result)
    by_thread = view.by_label("thread_name", "samples")
    # Waking up costs a few microseconds of CPU: allow a sample or two.
    assert by_thread.get("sleeper", 0) <= 2, by_thread
    assert by_thread.get("reader", 0) <= 2, by_thread
    assert by_thread.get("MainThread", 0) >= 500, by_thread


def test_native_thread_without_python_state(native_lib):
    import ctypes

    native_lib.burn_in_native_thread.argtypes = [ctypes.c_double]
    with samprof.CPUProfiler(hz=1000) as prof:
        assert native_lib.burn_in_native_thread(0.5) == 0
    view = check_profile(prof.result)
    native = view.by_function("cpu").get("<native thread>", 0)
    assert native >= 0.4e9, view.by_function("cpu")


def test_threads_started_before_and_after_start():
    go = threading.Event()
    cpu = {}

    def worker(name):
        go.wait()
        cpu[name] = hash_for(0.4)

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
        assert abs(by_thread.get(name, 0) / 1e9 - cpu[name]) <= 0.1 * cpu[name] + 0.01, (
            by_thread,
            cpu,
        )
