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

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from support.workloads import burn_cpu

import samprof.asgi


def fast_work() -> float:
    return burn_cpu(0.002)


def slow_work() -> float:
    return burn_cpu(0.004)


async def take_turns(work) -> PlainTextResponse:
    """10 rounds of work, letting the other requests run after each."""
    used = 0.0
    for _ in range(10):
        used += work()
        await asyncio.sleep(0)
    return PlainTextResponse(f"{used:.9f}\n")


async def fast(request):
    return await take_turns(fast_work)


async def slow(request):
    return await take_turns(slow_work)


app = samprof.asgi.ProfilerMiddleware(
    Starlette(routes=[Route("/fast/{n}", fast), Route("/slow/{n}", slow)]),
    when=os.environ.get("SAMPROF_TEST_WHEN", "always"),
    profile_dir=os.environ.get("SAMPROF_TEST_PROFILE_DIR"),
    hz=1000,
)
