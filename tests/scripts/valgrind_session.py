"""A short profiling session for valgrind's memcheck: a CPU profile at
1 kHz with two busy threads and a thread that starts and ends meanwhile,
all in labels blocks (which the samplers read from each thread's context),
and asyncio tasks taking turns under labels of their own; then a wall
profile, the same, each read back. Keeps the work small: everything runs
some 50 times slower under valgrind."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time

import samprof
from samprof.pprof import Profile


def work(seconds: float) -> None:
    with samprof.labels(thread=threading.current_thread().name):
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            n += sum(i * i for i in range(100))


async def task(name: str, seconds: float) -> None:
    with samprof.labels(task=name):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sum(i * i for i in range(100))
            await asyncio.sleep(0)


async def tasks(seconds: float) -> None:
    await asyncio.gather(*(task(f"t{i}", seconds) for i in range(3)))


def session(cls, seconds: float) -> None:
    with samprof.labels(phase=cls.__name__):
        threads = [threading.Thread(target=work, args=(seconds,)) for _ in range(2)]
        with cls(hz=1000) as prof:
            for t in threads:
                t.start()
            late = threading.Thread(target=work, args=(seconds / 3,))
            late.start()
            work(seconds / 2)
            asyncio.run(tasks(seconds / 2))
            late.join()
            for t in threads:
                t.join()
    Profile.parse(gzip.decompress(prof.result))
    print(cls.__name__, prof.stats, flush=True)


if __name__ == "__main__":
    session(samprof.CPUProfiler, 0.5)
    session(samprof.WallProfiler, 0.3)
