"""Wall mode in a thread-per-request server: every request's thread lives
from a few milliseconds to half a second, and each route's wall time in the
profile is what the route measured of itself.

The server is the standard library's ``ThreadingHTTPServer``
(socketserver's ``ThreadingMixIn``, what Django's runserver uses too): a new
thread per request, which ends when the response is sent."""

from __future__ import annotations

import http.client
import http.server
import threading
import time
from collections import Counter

import pytest
from support import SANITIZED
from support.measure import measure, within_ratio
from support.profiles import check_profile

import samprof

# route -> (seconds each request sleeps in it, requests at scale 1)
ROUTES = {"route_5ms": (0.005, 200), "route_50ms": (0.05, 40), "route_500ms": (0.5, 4)}
CLIENTS = 4


def route_5ms(seconds):
    time.sleep(seconds)


def route_50ms(seconds):
    time.sleep(seconds)


def route_500ms(seconds):
    time.sleep(seconds)


class _Handler(http.server.BaseHTTPRequestHandler):
    truth: Counter = Counter()
    lock = threading.Lock()

    def do_GET(self):
        name = self.path.strip("/")
        seconds, _ = ROUTES[name]
        t0 = time.perf_counter()
        globals()[name](seconds)
        took = time.perf_counter() - t0
        with self.lock:
            self.truth[name] += took
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _client(port, plan, errors):
    try:
        for name, count in plan:
            for _ in range(count):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/" + name)
                assert conn.getresponse().read() == b"ok"
                conn.close()
    except Exception as e:  # reported by the test
        errors.append(e)


@pytest.mark.skipif(SANITIZED, reason="timing accuracy is not meaningful under ASan")
@pytest.mark.accuracy
def test_per_route_wall_time_in_a_thread_per_request_server():
    """Each route's wall time within 3% of what it measured, at 100 Hz,
    with 4 concurrent clients. Spread (20 first attempts, Python 3.11,
    2-core VM): error of the 5 ms route min/median/max
    -0.3%/+1.1%/+1.8%, of the 50 ms route -1.2%/-0.4%/+0.8%; |error| of the 500 ms
    route 0.1%/0.1%/0.4%. Before new threads were probed from their start
    (and known by thread state id, not by a reused address), the 5 ms route
    came out 46% short, the 50 ms route 10%."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    port = server.server_address[1]

    def attempt(scale):
        _Handler.truth.clear()
        plan = [(name, max(1, round(n * scale / CLIENTS))) for name, (_, n) in ROUTES.items()]
        errors = []
        clients = [
            threading.Thread(target=_client, args=(port, plan, errors)) for _ in range(CLIENTS)
        ]
        with samprof.WallProfiler(hz=100) as prof:
            for c in clients:
                c.start()
            for c in clients:
                c.join(timeout=60)
        assert not errors, errors
        assert not any(c.is_alive() for c in clients)
        view = check_profile(prof.result, go=False)
        got = Counter()
        for frames, _labels, values in view.samples():
            names = {f[0] for f in frames}
            for name in ROUTES:
                if name in names:
                    got[name] += values[1] / 1e9
        for name in ROUTES:
            within_ratio(got[name], _Handler.truth[name], 0.03, f"{name} wall seconds", dict(got))

    try:
        measure(attempt)
    finally:
        server.shutdown()
        server.server_close()
