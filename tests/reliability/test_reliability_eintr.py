"""Threads blocked in raw libc calls (through ctypes, so no PEP 475 retry
hides anything) never see EINTR while samprof profiles at 1 kHz: a signal
must never land on a thread that is blocked, whatever the engine (CPU
timers only fire for threads that run; wall mode sends no signal)."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import threading
import time

import pytest
from support.native import perf_available
from support.workloads import burn_cpu

import samprof

libc = ctypes.CDLL(None, use_errno=True)
libc.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
libc.read.restype = ctypes.c_ssize_t
libc.accept.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
libc.poll.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int]
libc.epoll_wait.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
libc.select.argtypes = [
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
]

# How long each call blocks.
BLOCK = 0.25


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


def _call(name, fn, failures, min_seconds=BLOCK):
    """Runs fn() (a libc call returning an int) and records EINTR or an
    early return."""
    t0 = time.monotonic()
    ret = fn()
    err = ctypes.get_errno()
    took = time.monotonic() - t0
    if ret < 0 and err == errno.EINTR:
        failures.append(f"{name}: EINTR after {took:.3f}s")
    elif ret < 0:
        failures.append(f"{name}: failed with {errno.errorcode.get(err, err)}")
    elif took < min_seconds * 0.95:
        failures.append(f"{name}: returned {ret} after {took:.3f}s < {min_seconds}s")


def _blocked_read(failures):
    r, w = os.pipe()
    buf = ctypes.create_string_buffer(1)
    timer = threading.Timer(BLOCK, os.write, args=(w, b"x"))
    timer.start()
    # The write comes BLOCK after the timer starts, which may be before
    # this thread gets to call read: only the outcome is checked.
    _call("read(pipe)", lambda: libc.read(r, buf, 1), failures, min_seconds=0)
    timer.join()
    os.close(r)
    os.close(w)


def _blocked_accept(failures):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def connect():
        time.sleep(BLOCK)
        socket.create_connection(("127.0.0.1", port)).close()

    client = threading.Thread(target=connect)
    client.start()
    fds = []

    def accept():
        fd = libc.accept(listener.fileno(), None, None)
        fds.append(fd)
        return fd

    _call("accept", accept, failures, min_seconds=0)
    client.join()
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    listener.close()


def _blocked_poll(failures):
    _call("poll", lambda: libc.poll(None, 0, int(BLOCK * 1000)), failures)


def _blocked_nanosleep(failures):
    ts = Timespec(0, int(BLOCK * 1e9))
    _call("nanosleep", lambda: libc.nanosleep(ctypes.byref(ts), None), failures)


def _blocked_epoll_wait(failures):
    ep = libc.epoll_create1(0)
    events = ctypes.create_string_buffer(12 * 4)
    _call("epoll_wait", lambda: libc.epoll_wait(ep, events, 4, int(BLOCK * 1000)), failures)
    os.close(ep)


def _blocked_select(failures):
    tv = Timeval(0, int(BLOCK * 1e6))
    _call("select", lambda: libc.select(0, None, None, None, ctypes.byref(tv)), failures)


BLOCKERS = [
    _blocked_read,
    _blocked_accept,
    _blocked_poll,
    _blocked_nanosleep,
    _blocked_epoll_wait,
    _blocked_select,
]


@pytest.mark.parametrize(
    "mode, engine",
    [
        ("wall", "auto"),
        ("cpu", "auto"),
        ("cpu", "perf"),
        ("cpu", "timer"),
        ("cpu", "itimer"),
    ],
)
def test_blocked_libc_calls_never_see_eintr(mode, engine):
    if engine == "perf" and not perf_available():
        pytest.skip("perf events are not available here")
    failures = []
    stop = threading.Event()

    def busy():
        # CPU work in other threads, so that the timers do fire meanwhile.
        while not stop.is_set():
            burn_cpu(0.005)

    burners = [threading.Thread(target=busy) for _ in range(2)]
    blocked = [threading.Thread(target=fn, args=(failures,)) for fn in BLOCKERS]
    cls = samprof.CPUProfiler if mode == "cpu" else samprof.WallProfiler
    with cls(hz=1000, engine=engine) as prof:
        for t in burners + blocked:
            t.start()
        for t in blocked:
            t.join()
        stop.set()
        for t in burners:
            t.join()
    # Signals were flying meanwhile (tick-bound engines deliver a few
    # hundred a second at most).
    assert prof.stats.samples > 10, prof.stats
    assert not failures, failures
