"""A soak of samprof.serve() in a working process: 1,000 sequential short
requests and 50 concurrent ones to goroutine?debug=2 and heap. Nothing
may leak: the process's threads and descriptors come back to what they
were, and its memory stays flat."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.httpclient import get, serving_process

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds

PATHS = ("/debug/pprof/goroutine?debug=2", "/debug/pprof/heap")


def _state(pid: int):
    """(threads, open descriptors, RSS in KiB) of process pid."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return int(fields["Threads"][0]), len(os.listdir(f"/proc/{pid}/fd")), int(fields["VmRSS"][0])


def _settled(pid: int, threads: int, seconds: float = 10):
    """The state once the server's request threads are gone (each ends
    after its answer is sent), or as it is after seconds."""
    deadline = time.monotonic() + seconds
    while True:
        state = _state(pid)
        if state[0] <= threads or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def test_soak_leaks_nothing():
    # The process allocates and runs an event loop meanwhile; no thread
    # burns CPU, which would make each request wait for the GIL (~25 ms).
    with serving_process(300, loads="alloc,asyncio") as (_, port, pid):
        for i in range(100):  # warm up: the heap profile's tables, caches
            assert get(port, PATHS[i % 2])[0] == 200
        threads, fds, rss = _settled(pid, 0, seconds=1)
        for i in range(1000):
            status, _, body = get(port, PATHS[i % 2])
            assert status == 200, body
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda i: get(port, PATHS[i % 2])[0], range(50)))
        # More than max_connections (8) at once are refused, never hung.
        assert set(answers) <= {200, 503} and answers.count(200) >= 8, answers
        after = _settled(pid, threads)
        assert after[0] == threads, (threads, after)
        assert after[1] == fds, (fds, after)
        assert after[2] - rss < 16 * 1024, f"RSS grew from {rss} to {after[2]} KiB"
