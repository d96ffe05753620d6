"""A process under load with samprof's /debug/pprof endpoints on.

    python http_target.py SECONDS [SERVE_KWARGS_JSON [LOADS]]

Prints one JSON line ({"url", "port", "pid"}) once the server listens and the
loads run (the allocating one holds what it keeps), and runs three threads
until stdin closes or SECONDS pass: cpu_load_for_http burns
CPU in pure Python, alloc_load_for_http makes and drops bytearrays and
keeps some (about 20 MB) alive, and an asyncio loop runs two tasks
suspended in waiting_task_for_http. LOADS (default cpu,alloc,asyncio)
picks some of them: without cpu, no thread keeps the GIL busy, so a
request is answered in milliseconds instead of waiting for switch
intervals.
"""

import asyncio
import json
import os
import sys
import threading

import samprof


def cpu_load_for_http(stop):
    x = 0
    while not stop.is_set():
        for i in range(20000):
            x = (x * 31 + i) % 1000003
    return x


# Set once alloc_load_for_http holds all it keeps: the process counts as
# loaded from then on (a heap profile taken earlier may hold none of it).
holding = threading.Event()


def alloc_load_for_http(stop):
    kept = []
    while not stop.is_set():
        for _ in range(100):
            block = bytearray(64 * 1024)
            if len(kept) < 300:
                kept.append(block)
        if len(kept) == 300:
            holding.set()
        stop.wait(0.001)
    return len(kept)


async def waiting_task_for_http(stop):
    while not stop.is_set():
        await asyncio.sleep(0.05)


def event_loop_for_http(stop):
    async def run():
        tasks = [asyncio.ensure_future(waiting_task_for_http(stop)) for _ in range(2)]
        await asyncio.gather(*tasks)

    asyncio.run(run())


def main():
    seconds = float(sys.argv[1])
    kwargs = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    server = samprof.serve(port=0, **kwargs)
    loads = (sys.argv[3] if len(sys.argv) > 3 else "cpu,alloc,asyncio").split(",")
    stop = threading.Event()
    threads = [
        threading.Thread(target=target, args=(stop,), name=name)
        for load, target, name in (
            ("cpu", cpu_load_for_http, "cpu-load"),
            ("alloc", alloc_load_for_http, "alloc-load"),
            ("asyncio", event_loop_for_http, "event-loop"),
        )
        if load in loads
    ]
    for t in threads:
        t.start()
    if "alloc" in loads:
        holding.wait(30)
    print(json.dumps({"url": server.url, "port": server.port, "pid": os.getpid()}), flush=True)
    waiter = threading.Thread(target=sys.stdin.read, daemon=True)
    waiter.start()
    waiter.join(seconds)
    stop.set()
    for t in threads:
        t.join()
    server.close()


if __name__ == "__main__":
    main()
