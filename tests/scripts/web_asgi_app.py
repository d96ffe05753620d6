"""A Starlette application for uvicorn, profiled by samprof's middleware.

/fast/{n} and /slow/{n} are coroutines that take turns with every other
request at each await: 10 rounds of (2 or 4 ms of CPU, then
asyncio.sleep(0)). Each answer is the CPU the request used between its
awaits (time.thread_time), the truth the test compares the profiles with.
The routes are Starlette's: the middleware finds their templates itself.
Environment: SAMPROF_TEST_PROFILE_DIR, SAMPROF_TEST_WHEN (always or
trigger).
"""

from __future__ import annotations

import asyncio
import os
import time

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import samprof.asgi


def burn(seconds: float) -> float:
    t0 = time.thread_time()
    n = 0
    while time.thread_time() - t0 < seconds:
        for i in range(500):
            n += i
    return time.thread_time() - t0


def fast_work() -> float:
    return burn(0.002)


def slow_work() -> float:
    return burn(0.004)


async def fast(request):
    used = 0.0
    for _ in range(10):
        used += fast_work()
        await asyncio.sleep(0)
    return PlainTextResponse(f"{used:.9f}\n")


async def slow(request):
    used = 0.0
    for _ in range(10):
        used += slow_work()
        await asyncio.sleep(0)
    return PlainTextResponse(f"{used:.9f}\n")


app = samprof.asgi.ProfilerMiddleware(
    Starlette(routes=[Route("/fast/{n}", fast), Route("/slow/{n}", slow)]),
    when=os.environ.get("SAMPROF_TEST_WHEN", "always"),
    profile_dir=os.environ.get("SAMPROF_TEST_PROFILE_DIR"),
    hz=1000,
)
