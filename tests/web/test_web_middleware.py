"""samprof.wsgi.ProfilerMiddleware called directly, as a WSGI server calls
it: which requests it profiles, the labels they carry, a backend of the
user's own, the files, and the errors for bad options. (The servers from
PyPI and the accuracy of the routes' shares: test_web_servers.py.)"""

from __future__ import annotations

import gc
import io
import marshal
import os
import pstats
import re
import time
from typing import Any, Dict, List, Optional

import pytest
from support import SANITIZED
from support.workloads import burn_python_for

import samprof
import samprof.wsgi
from samprof import _core, pprof


def call(app: Any, path: str = "/", query: str = "", **headers: str) -> tuple:
    """Calls the WSGI app as a server does: (status, headers, body)."""
    environ: Dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "wsgi.input": io.BytesIO(),
    }
    for name, value in headers.items():
        environ["HTTP_" + name.upper()] = value
    got: Dict[str, Any] = {}

    def start_response(status: str, headers: List[tuple], exc_info: Any = None) -> Any:
        got["status"], got["headers"] = status, dict(headers)
        return lambda data: None

    body = app(environ, start_response)
    try:
        data = b"".join(body)
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    return got["status"], got["headers"], data


def labels_app(seen: List[Dict[str, str]]) -> Any:
    """An app that records the labels in effect, before and after it
    names its route, and while its body is sent."""

    def app(environ: Dict[str, Any], start_response: Any) -> Any:
        seen.append(samprof.current_labels())
        if environ["PATH_INFO"].startswith("/users/"):
            samprof.wsgi.set_route("/users/{id}")
            seen.append(samprof.current_labels())
        start_response("404 Not Found", [("Content-Type", "text/plain")])

        def body():
            seen.append(samprof.current_labels())
            yield b"body\n"

        return body()

    return app


def test_labels_of_a_request():
    seen: List[Dict[str, str]] = []
    app = samprof.wsgi.ProfilerMiddleware(labels_app(seen))
    assert call(app, "/users/42")[2] == b"body\n"
    assert seen == [
        {"route": "/users/…", "method": "GET"},
        {"route": "/users/{id}", "method": "GET"},
        {"route": "/users/{id}", "method": "GET", "status": "4xx"},
    ]
    assert samprof.current_labels() == {}
    call(app, "/")
    assert seen[-2]["route"] == "/"
    app.profiling.backend.close()


def test_untriggered_requests_pass_straight_through():
    calls = []
    answer = [b"ok\n"]

    def app(environ: Dict[str, Any], start_response: Any) -> Any:
        calls.append(samprof.current_labels())
        start_response("200 OK", [])
        return answer

    mw = samprof.wsgi.ProfilerMiddleware(app, when="trigger", trigger_token="s3cret")
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "QUERY_STRING": ""}
    # The application's own body object: nothing wrapped, nothing labelled.
    assert mw(environ, lambda *a: None) is answer
    assert call(mw, "/", "samprof=wrong")[2] == b"ok\n"
    assert call(mw, "/", X_SAMPROF="wrong")[2] == b"ok\n"
    assert calls == [{}, {}, {}]
    assert not _core.is_running()
    # The right token: the answer is the request's profile.
    status, headers, data = call(mw, "/", "samprof=s3cret")
    assert status == "200 OK" and headers["Content-Type"] == "application/octet-stream"
    assert calls[-1] == {"route": "/", "method": "GET"}
    assert pprof.read(data).sample_types[0].type == "samples"
    assert not _core.is_running()


def test_triggered_profile_holds_the_request():
    def app(environ: Dict[str, Any], start_response: Any) -> Any:
        burn_python_for(0.05)
        start_response("200 OK", [])
        return [b"ok\n"]

    mw = samprof.wsgi.ProfilerMiddleware(app, when="trigger", hz=1000)
    status, headers, data = call(mw, "/x", "samprof")
    profile = pprof.read(data)
    functions = {f.name for f in profile.functions}
    assert "burn_python_for" in functions, functions
    assert {profile.labels_of(s).get("route") for s in profile.samples} == {"/x"}
    # A browser gets a page with the top functions and the file.
    status, headers, page = call(mw, "/x", "samprof", ACCEPT="text/html,*/*")
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert b"burn_python_for" in page and b"base64," in page


def test_a_running_profile_leaves_requests_unprofiled():
    mw = samprof.wsgi.ProfilerMiddleware(labels_app([]), when="trigger")
    with samprof.CPUProfiler():
        status, _, body = call(mw, "/x", "samprof")
    assert status.startswith("503") and b"another CPU or wall profile runs" in body
    assert mw.profiling.backend.unprofiled == 1


def test_fraction_and_function_choose_requests():
    seen: List[Dict[str, str]] = []
    app = samprof.wsgi.ProfilerMiddleware(
        labels_app(seen), when=lambda environ: environ["PATH_INFO"].startswith("/api")
    )
    call(app, "/api/a")
    call(app, "/static/a")
    assert seen[0] == {"route": "/api/…", "method": "GET"} and seen[2] == {}
    seen.clear()
    app = samprof.wsgi.ProfilerMiddleware(labels_app(seen), when=0.5)
    for _ in range(200):
        call(app, "/")
    profiled = sum(1 for labels in seen[::2] if labels)
    assert 60 < profiled < 140, profiled  # binomial(200, 0.5): 6 sigma either side


class CountingBackend(samprof.Backend):
    """A backend of the user's own: counts requests by route, writes text."""

    suffix = ".txt"

    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}

    def begin(self, request: samprof.RequestInfo) -> None:
        request.state = "begun"

    def end(self, request: samprof.RequestInfo) -> Optional[bytes]:
        assert request.state == "begun"
        self.counts[request.route] = self.counts.get(request.route, 0) + 1
        return None

    def collect(self) -> Optional[bytes]:
        counts, self.counts = self.counts, {}
        if not counts:
            return None
        return "".join(f"{k} {v}\n" for k, v in sorted(counts.items())).encode()


def test_a_backend_of_ones_own_and_the_files(tmp_path):
    backend = CountingBackend()
    app = samprof.wsgi.ProfilerMiddleware(
        labels_app([]), backend=backend, profile_dir=str(tmp_path), name="app"
    )
    for path in ("/users/1", "/users/2", "/"):
        call(app, path)
    first = app.profiling.flush()
    assert app.profiling.flush() is None  # nothing new
    call(app, "/")
    app.profiling.shutdown()
    assert sorted(os.listdir(tmp_path)) == [f"app.{os.getpid()}.0.txt", f"app.{os.getpid()}.1.txt"]
    assert open(first).read() == "/ 1\n/users/{id} 2\n"
    assert open(tmp_path / f"app.{os.getpid()}.1.txt").read() == "/ 1\n"


def test_an_exception_ends_the_request():
    def app(environ: Dict[str, Any], start_response: Any) -> Any:
        raise RuntimeError("boom")

    mw = samprof.wsgi.ProfilerMiddleware(app)
    with pytest.raises(RuntimeError, match="boom"):
        call(mw, "/")
    assert samprof.current_labels() == {}
    mw.profiling.backend.close()
    assert not _core.is_running()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"when": "sometimes"}, "when must be"),
        ({"when": 0}, "must be in (0, 1]"),
        ({"when": 1.5}, "must be in (0, 1]"),
        ({"when": True}, "when must be"),
        ({"backend": "yappi"}, "backend must be"),
        ({"flush_interval": 0}, "flush_interval must be positive"),
        ({"trigger_token": ""}, "trigger_token must be"),
        ({"mode": "heap"}, "mode must be"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        samprof.wsgi.ProfilerMiddleware(labels_app([]), **options)


def test_cprofile_backend_counts_exactly(tmp_path):
    def leaf() -> int:
        return 1

    def app(environ: Dict[str, Any], start_response: Any) -> Any:
        k = int(environ["PATH_INFO"].strip("/"))
        total = sum(leaf() for _ in range(k))
        start_response("200 OK", [])
        return [str(total).encode()]

    mw = samprof.wsgi.ProfilerMiddleware(app, backend="cprofile", profile_dir=str(tmp_path))
    for k in (3, 5, 7):
        assert call(mw, f"/{k}")[2] == str(k).encode()
    mw.profiling.shutdown()
    [name] = os.listdir(tmp_path)
    assert name == f"samprof.{os.getpid()}.0.prof"
    stats = pstats.Stats(str(tmp_path / name)).stats
    by_name = {key[2]: value for key, value in stats.items()}
    assert by_name["leaf"][1] == 15 and by_name["app"][1] == 3
    # Nothing of samprof's imports: they happen before the first request.
    assert not any("importlib" in key[0] for key in stats), sorted(stats)[:10]
    # A triggered request gets its own pstats.
    mw = samprof.wsgi.ProfilerMiddleware(app, backend="cprofile", when="trigger")
    status, headers, data = call(mw, "/4", "samprof")
    assert headers["Content-Disposition"] == 'attachment; filename="profile.prof"'
    mine = {key[2]: value for key, value in marshal.loads(data).items()}
    assert mine["leaf"][1] == 4
    status, headers, page = call(mw, "/4", "samprof", ACCEPT="text/html")
    assert b"leaf" in page and b"exact call counts" in page


def test_cprofile_backend_shares_its_profiler_and_loses_no_call():
    """Requests that overlap in one thread (coroutines on an event loop)
    share one profiler; a flush while they run takes its calls at their
    next step, none counted twice or lost."""
    from samprof._middleware import CProfileBackend, RequestInfo

    def leaf() -> int:
        return 1

    def run(k: int) -> None:
        for _ in range(k):
            leaf()

    def leaf_calls(data: bytes) -> int:
        return sum(v[1] for key, v in marshal.loads(data).items() if key[2] == "leaf")

    backend = CProfileBackend()
    a, b = RequestInfo("GET", "/a", False), RequestInfo("GET", "/b", False)
    backend.begin(a)
    run(3)
    backend.begin(b)
    run(4)
    assert backend.collect() is None  # both run: their profiler is taken at the next step
    trigger = RequestInfo("GET", "/t", True)
    backend.begin(trigger)  # the thread's profiler is taken: served unprofiled
    assert trigger.state is None and backend.unprofiled == 1
    backend.end(b)
    run(5)
    backend.end(a)
    run(100)  # between requests: not profiled
    assert leaf_calls(backend.collect()) == 12
    assert backend.collect() is None
    backend.begin(trigger)
    run(6)
    assert leaf_calls(backend.end(trigger)) == 6
    assert leaf_calls(backend.collect()) == 6


def server_timing(value: str) -> Dict[str, float]:
    """'total;dur=1.5, cpu;dur=1.0, gc;dur=0.0' as {name: milliseconds}."""
    out = {}
    for part in value.split(","):
        name, _, dur = part.strip().partition(";dur=")
        out[name] = float(dur)
    return out


def make_garbage() -> None:
    # Cycles only the cyclic GC frees; then a collection of them.
    for _ in range(20000):
        a: List[Any] = []
        a.append(a)
    gc.collect()


@pytest.mark.skipif(SANITIZED, reason="timing is not meaningful under ASan")
def test_server_timing_wsgi():
    measured = {}

    def app(environ: Dict[str, Any], start_response: Any) -> Any:
        t0 = time.thread_time()
        burn_python_for(0.03)
        make_garbage()
        measured["cpu"] = (time.thread_time() - t0) * 1e3
        start_response("200 OK", [])
        return [b"ok"]

    # Not profiled (no trigger), but timed.
    mw = samprof.wsgi.ProfilerMiddleware(app, when="trigger", server_timing=True)
    _, headers, _ = call(mw, "/")
    timing = server_timing(headers["Server-Timing"])
    assert set(timing) == {"total", "cpu", "gc"}
    # The CPU of the request's thread: the application's, plus the
    # middleware's own little (the header rounds to 0.1 ms).
    assert measured["cpu"] - 0.1 <= timing["cpu"] <= measured["cpu"] * 1.2 + 2, (timing, measured)
    assert timing["total"] >= timing["cpu"] * 0.9
    assert timing["gc"] > 0, timing


@pytest.mark.skipif(SANITIZED, reason="timing is not meaningful under ASan")
def test_server_timing_asgi_counts_each_requests_own_steps():
    """Two requests take turns on one event loop; each header counts the
    CPU of its own steps, not of the other's between them."""
    import asyncio

    import samprof.asgi

    burns = {"/a": 0.002, "/b": 0.006}
    measured = {"/a": 0.0, "/b": 0.0}

    async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        for _ in range(10):
            measured[scope["path"]] += burn_python_for(burns[scope["path"]]) * 1e3
            await asyncio.sleep(0)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = samprof.asgi.ProfilerMiddleware(app, when="trigger", server_timing=True)

    async def request(path: str) -> Dict[str, float]:
        sent: List[Dict[str, Any]] = []

        async def receive() -> Dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}
        await mw(scope, receive, send)
        headers = dict(sent[0]["headers"])
        return server_timing(headers[b"server-timing"].decode())

    async def both() -> List[Dict[str, float]]:
        return await asyncio.gather(request("/a"), request("/b"))

    timing_a, timing_b = asyncio.run(both())
    for path, timing in (("/a", timing_a), ("/b", timing_b)):
        got, want = timing["cpu"], measured[path]
        assert want - 0.1 <= got <= want * 1.2 + 2, (path, timing, measured)
    # Their walls overlap: each took about as long as both together.
    assert timing_a["total"] > measured["/a"] + measured["/b"] * 0.5


@pytest.mark.parametrize("router", ["setitem", "update", "endpoint"])
def test_asgi_finds_the_route_however_the_router_names_it(router):
    """Starlette and FastAPI routers name the route they picked in the
    scope: scope["route"] = route, scope.update({"route": route, ...}) (the
    router of FastAPI 0.1xx with Starlette 1.x), or, in older versions,
    only the endpoint, found among the application's routes."""
    import asyncio
    import types

    import samprof.asgi
    from samprof._middleware import _current

    def endpoint() -> None:
        pass

    route = types.SimpleNamespace(path="/users/{user_id}", endpoint=endpoint)
    seen: Dict[str, str] = {}
    blocks: List[int] = []

    async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if router == "setitem":  # Starlette: then the endpoint, found again
            scope["route"] = route
            scope.update({"endpoint": endpoint, "path_params": {"user_id": 7}})
        elif router == "update":  # FastAPI: named twice
            scope["route"] = route
            scope.update({"route": route, "endpoint": endpoint, "path_params": {"user_id": 7}})
        else:
            scope.update({"endpoint": endpoint, "path_params": {"user_id": 7}})
        seen.update(samprof.current_labels())
        blocks.append(len(_current.get().labels))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app.routes = [types.SimpleNamespace(path="/other", endpoint=None), route]  # type: ignore
    mw = samprof.asgi.ProfilerMiddleware(app, when="always")

    async def request() -> None:
        async def receive() -> Dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Dict[str, Any]) -> None:
            pass

        scope = {"type": "http", "method": "GET", "path": "/users/7", "headers": []}
        scope.update(query_string=b"", app=app)
        await mw(scope, receive, send)

    try:
        asyncio.run(request())
    finally:
        mw.profiling.shutdown()
    assert seen["route"] == "/users/{user_id}", seen
    assert blocks == [2]  # the request's labels, then its route: once


def test_profiled_functions_and_blocks(tmp_path):
    import asyncio

    begun = []

    class Recording(samprof.Backend):
        def begin(self, request: samprof.RequestInfo) -> None:
            begun.append(samprof.current_labels())

    mw = samprof.wsgi.ProfilerMiddleware(labels_app([]), backend=Recording())

    @samprof.profiled(middleware=mw)
    def countdown(n: int) -> Dict[str, str]:
        if n:
            return countdown(n - 1)  # recursion: part of the outermost call
        return samprof.current_labels()

    @samprof.profiled(name="outer", middleware=mw)
    def outer() -> Dict[str, str]:
        return countdown(2)  # another profiled function: part of this call

    @samprof.profiled(middleware=mw)
    async def waits() -> Dict[str, str]:
        await asyncio.sleep(0)
        return samprof.current_labels()

    assert countdown(3) == {"function": "test_profiled_functions_and_blocks.<locals>.countdown"}
    assert outer() == {"function": "outer"}
    assert asyncio.run(waits())["function"].endswith("waits")
    with samprof.profiled("block", middleware=mw):
        assert samprof.current_labels() == {"function": "block"}
    assert samprof.current_labels() == {}
    assert len(begun) == 4  # one per outermost call or block

    # With the sampler, into the middleware's files.
    mw = samprof.wsgi.ProfilerMiddleware(
        labels_app([]), when="trigger", hz=1000, profile_dir=str(tmp_path)
    )

    @samprof.profiled
    def busy() -> None:
        burn_python_for(0.05)

    busy()
    mw.profiling.shutdown()
    [name] = os.listdir(tmp_path)
    profile = pprof.read(open(tmp_path / name, "rb").read())
    functions = {profile.labels_of(s).get("function") for s in profile.samples}
    assert functions == {"test_profiled_functions_and_blocks.<locals>.busy"}, functions
