"""A WSGI application for gunicorn, profiled by samprof's middleware.

/heavy/<n> and /light/<n> burn about 20 and 10 ms of CPU; /heavy names its
route template with samprof.wsgi.set_route, /light is left to the
fallback. Each answer is the CPU the request used inside the application
(time.thread_time), the truth the test compares the profiles with.
/calls/<k> calls counted_leaf exactly k times (for the cProfile backend).
Environment: SAMPROF_TEST_PROFILE_DIR (where the profiles go),
SAMPROF_TEST_HZ, SAMPROF_TEST_BACKEND (sampling or cprofile).
"""

from __future__ import annotations

import os
import time

from support.workloads import burn_cpu

import samprof.wsgi


def heavy_work() -> None:
    burn_cpu(0.02)


def light_work() -> None:
    burn_cpu(0.01)


def counted_leaf() -> int:
    return 1


def count_calls(k: int) -> int:
    return sum(counted_leaf() for _ in range(k))


def application(environ, start_response):
    t0 = time.thread_time()
    path = environ.get("PATH_INFO", "")
    if path.startswith("/heavy/"):
        samprof.wsgi.set_route("/heavy/{n}")
        heavy_work()
    elif path.startswith("/light/"):
        light_work()
    elif path.startswith("/calls/"):
        count_calls(int(path.split("/")[2]))
    used = time.thread_time() - t0
    body = f"{used:.9f}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


app = samprof.wsgi.ProfilerMiddleware(
    application,
    profile_dir=os.environ["SAMPROF_TEST_PROFILE_DIR"],
    flush_interval=1.0,
    hz=int(os.environ.get("SAMPROF_TEST_HZ", "1000")),
    backend=os.environ.get("SAMPROF_TEST_BACKEND", "sampling"),
)
