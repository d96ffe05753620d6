"""A process under load with samprof's /debug/pprof endpoints on.

    python http_target.py SECONDS [SERVE_KWARGS_JSON]

Prints one JSON line ({"url", "port"}) once the server listens, then runs
two threads until stdin closes or SECONDS pass: cpu_load_for_http burns CPU
in pure Python, alloc_load_for_http makes and drops bytearrays and keeps
some (about 20 MB) alive.
"""

import json
import sys
import threading

import samprof


def cpu_load_for_http(stop):
    x = 0
    while not stop.is_set():
        for i in range(20000):
            x = (x * 31 + i) % 1000003
    return x


def alloc_load_for_http(stop):
    kept = []
    while not stop.is_set():
        for _ in range(100):
            block = bytearray(64 * 1024)
            if len(kept) < 300:
                kept.append(block)
        stop.wait(0.001)
    return len(kept)


def main():
    seconds = float(sys.argv[1])
    kwargs = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    server = samprof.serve(port=0, **kwargs)
    print(json.dumps({"url": server.url, "port": server.port}), flush=True)
    stop = threading.Event()
    threads = [
        threading.Thread(target=cpu_load_for_http, args=(stop,), name="cpu-load"),
        threading.Thread(target=alloc_load_for_http, args=(stop,), name="alloc-load"),
    ]
    for t in threads:
        t.start()
    waiter = threading.Thread(target=sys.stdin.read, daemon=True)
    waiter.start()
    waiter.join(seconds)
    stop.set()
    for t in threads:
        t.join()
    server.close()


if __name__ == "__main__":
    main()
