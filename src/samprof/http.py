"""Go's ``net/http/pprof`` endpoints for a live Python process.

::

    import samprof.http

    server = samprof.http.serve(port=6060)     # a thread in this process
    print(server.url)                          # http://127.0.0.1:6060/debug/pprof/
    ...
    server.close()

and then, from anywhere that can reach it::

    go tool pprof http://127.0.0.1:6060/debug/pprof/profile?seconds=30
    go tool pprof http://127.0.0.1:6060/debug/pprof/heap

:class:`Endpoints` is the one implementation: a request in (path below the
mount point, query, headers), a :class:`Response` out. ``serve()`` puts it
behind a small threaded HTTP server of its own; the WSGI and ASGI apps put
it inside an existing web application. What each endpoint answers, its
headers and its error texts follow Go's handlers (docs/design.md §9), so
that ``go tool pprof`` and pprof scrapers work against it unchanged.
"""

from __future__ import annotations

import atexit
import gc
import hmac
import html
import json
import os
import sys
import tempfile
import threading
import time
import urllib.parse
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["Endpoints", "Request", "Response", "Server", "serve", "discovery_dir", "servers"]

# The longest capture (CPU, wall, delta profiles) a request may ask for.
DEFAULT_MAX_SECONDS = 300
# Go's default for profile?seconds when none (or a bad one) is given.
DEFAULT_SECONDS = 30
# How often a capture checks whether its client has gone.
_POLL_S = 0.1

_DESCRIPTIONS = {
    "allocs": "A sampling of all past memory allocations (needs a running heap profile).",
    "cmdline": "The command line invocation of the current program",
    "goroutine": "Stack traces of all current threads (debug=2: and asyncio tasks)",
    "threads": "The same as goroutine",
    "heap": "A sampling of memory allocations of live objects (needs a running heap "
    "profile). You can specify the gc GET parameter to run GC before taking the "
    "heap sample.",
    "profile": "CPU profile. You can specify the duration in the seconds GET parameter "
    "(and the sampling rate in hz). After you get the profile file, use the go tool "
    "pprof command to investigate the profile.",
    "wall": "Wall-clock profile: every thread, running or waiting. You can specify the "
    "duration in the seconds GET parameter (and the sampling rate in hz).",
}


@dataclass
class Request:
    """One request to the endpoints.

    ``path`` is the part below the mount point (``""`` for the index,
    ``"profile"``, ``"heap"``, ...), ``query`` the raw query string,
    ``headers`` the request headers with lower-case names.
    ``disconnected`` tells a long capture that its client has gone, so
    that it ends early; servers that cannot tell leave the default.
    """

    path: str
    query: str = ""
    method: str = "GET"
    headers: Dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    disconnected: Callable[[], bool] = lambda: False


@dataclass
class Response:
    """What to send back: a status, headers and the whole body."""

    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    def header(self, name: str) -> Optional[str]:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


def _error(status: int, text: str) -> Response:
    """Go's serveError: plain text ending in a newline, X-Go-Pprof set so
    that go tool pprof prints the text."""
    return Response(
        status,
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("X-Go-Pprof", "1"),
            ("X-Content-Type-Options", "nosniff"),
        ],
        (text + "\n").encode(),
    )


def _profile_response(name: str, data: bytes) -> Response:
    return Response(
        200,
        [
            ("Content-Type", "application/octet-stream"),
            ("Content-Disposition", f'attachment; filename="{name}"'),
            ("X-Content-Type-Options", "nosniff"),
        ],
        data,
    )


def _text_response(text: str, content_type: str = "text/plain; charset=utf-8") -> Response:
    return Response(
        200,
        [("Content-Type", content_type), ("X-Content-Type-Options", "nosniff")],
        text.encode(),
    )


def _int_param(params: Dict[str, List[str]], name: str) -> Optional[int]:
    """The parameter as an int; None when absent; raises ValueError when
    not an integer."""
    values = params.get(name)
    if not values:
        return None
    return int(values[0].strip(), 10)


class Endpoints:
    """The /debug/pprof endpoints, whatever serves them.

    ``token``: when set, every request must carry it, as ``Authorization:
    Bearer TOKEN`` or ``?token=TOKEN`` (compared in constant time); else
    401. ``allowed_hosts``: when set, the ``Host`` header must be one of
    them (lower case, with the port as sent), else 403: a page on another
    site cannot reach a loopback server through DNS rebinding.
    ``max_seconds`` bounds every capture (400 above it); ``hz`` is the
    default sampling rate of CPU and wall captures.
    """

    def __init__(
        self,
        *,
        token: Optional[str] = None,
        allowed_hosts: Optional[List[str]] = None,
        max_seconds: int = DEFAULT_MAX_SECONDS,
        hz: int = 100,
    ) -> None:
        if token is not None and (not isinstance(token, str) or not token):
            raise ValueError("token must be a non-empty string or None")
        if isinstance(max_seconds, bool) or not isinstance(max_seconds, int) or max_seconds < 1:
            raise ValueError(f"max_seconds must be a positive int, got {max_seconds!r}")
        self._token = token
        self.allowed_hosts = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}
        self.max_seconds = max_seconds
        self.hz = hz
        # One CPU or wall capture at a time through these endpoints; the
        # core allows one time profile per process anyway.
        self._capture = threading.Lock()
        self._closed = threading.Event()
        self._routes: Dict[str, Callable[[Request, Dict[str, List[str]]], Response]] = {
            "": self._index,
            "profile": lambda r, p: self._time_profile(r, p, "cpu"),
            "wall": lambda r, p: self._time_profile(r, p, "wall"),
            "heap": lambda r, p: self._heap(r, p, "heap"),
            "allocs": lambda r, p: self._heap(r, p, "allocs"),
            "goroutine": self._threads,
            "threads": self._threads,
            "cmdline": self._cmdline,
            "symbol": self._symbol,
        }

    def __repr__(self) -> str:  # never shows the token
        return f"Endpoints(token={'set' if self._token else None}, max_seconds={self.max_seconds})"

    def handle(self, request: Request) -> Response:
        """Answer one request. Never raises: a failure is a 500 whose text
        says what failed."""
        refused = self._check_access(request)
        if refused is not None:
            return refused
        if request.method not in ("GET", "HEAD", "POST"):
            return _error(405, "Method not allowed")
        route = self._routes.get(request.path.strip("/"))
        if route is None:
            return _error(404, "Unknown profile")
        params = urllib.parse.parse_qs(request.query, keep_blank_values=True)
        try:
            return route(request, params)
        except Exception as e:  # noqa: BLE001 - a profiling endpoint never takes the app down
            return _error(500, f"{type(e).__name__}: {e}")

    # -- access ------------------------------------------------------------

    def _check_access(self, request: Request) -> Optional[Response]:
        if self.allowed_hosts is not None:
            host = request.headers.get("host", "").lower()
            if host not in self.allowed_hosts:
                return _error(403, "Host not allowed")
        if self._token is not None:
            given = ""
            auth = request.headers.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                given = auth[7:].strip()
            else:
                given = urllib.parse.parse_qs(request.query).get("token", [""])[0]
            if not hmac.compare_digest(given.encode(), self._token.encode()):
                return Response(
                    401,
                    _error(401, "Unauthorized").headers + [("WWW-Authenticate", "Bearer")],
                    b"Unauthorized\n",
                )
        return None

    # -- captures ------------------------------------------------------------

    def _seconds(self, params: Dict[str, List[str]], default: Optional[int]) -> int:
        """seconds as Go's Profile reads it: absent, bad or <= 0 gives the
        default when there is one; above max_seconds is a 400 (ValueError
        with the text)."""
        try:
            sec = _int_param(params, "seconds")
        except ValueError:
            sec = None
        if sec is None or sec <= 0:
            if default is None:
                raise ValueError('invalid value for "seconds" - must be a positive integer')
            sec = default
        if sec > self.max_seconds:
            raise ValueError(
                f"profile duration exceeds the server's limit of {self.max_seconds} seconds"
            )
        return sec

    def _wait(self, request: Request, seconds: float) -> bool:
        """Sleeps seconds; False when the client went away meanwhile."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            if request.disconnected() or self._closed.is_set():
                return False
            self._closed.wait(min(_POLL_S, left))

    def close(self) -> None:
        """Ends the captures in progress at their next check (a server that
        stops calls it)."""
        self._closed.set()

    def _time_profile(self, request: Request, params: Dict[str, List[str]], mode: str) -> Response:
        from samprof._profiler import CPUProfiler, ProfilerError, WallProfiler

        try:
            seconds = self._seconds(params, DEFAULT_SECONDS)
        except ValueError as e:
            return _error(400, str(e))
        try:
            hz = _int_param(params, "hz") or self.hz
        except ValueError:
            return _error(400, 'invalid value for "hz" - must be a positive integer')
        cls = CPUProfiler if mode == "cpu" else WallProfiler
        try:
            prof = cls(hz)
        except ValueError as e:
            return _error(400, str(e))
        what = "CPU" if mode == "cpu" else "wall-clock"
        if not self._capture.acquire(blocking=False):
            return _error(500, f"Could not enable {what} profiling: cpu profiling already in use")
        try:
            try:
                prof.start()
            except ProfilerError as e:
                return _error(500, f"Could not enable {what} profiling: {e}")
            try:
                self._wait(request, seconds)
            finally:
                data = prof.stop()
        finally:
            self._capture.release()
        return _profile_response("profile" if mode == "cpu" else "wall", data)

    # -- heap ----------------------------------------------------------------

    def _heap(self, request: Request, params: Dict[str, List[str]], kind: str) -> Response:
        from samprof import _heap

        prof = _heap._slot.active
        if prof is None:
            return _error(
                404,
                f"{kind} profile unavailable: no heap profile is running in this process "
                "(start samprof.HeapProfiler(), or serve with heap=True)",
            )
        if params.get("seconds", [""])[0] != "":
            return self._heap_delta(request, params, kind, prof)
        try:
            debug = _int_param(params, "debug") or 0
            collect = (_int_param(params, "gc") or 0) > 0
        except ValueError:
            debug, collect = 0, False
        if kind == "heap" and collect:
            gc.collect()
        data = prof.snapshot(kind)
        if debug:
            return _text_response(_heap_text(data, kind))
        return _profile_response(kind, data)

    def _heap_delta(
        self, request: Request, params: Dict[str, List[str]], kind: str, prof
    ) -> Response:
        from samprof.pprof import read

        def collect():
            if not prof.running:
                raise RuntimeError("the heap profile was stopped")
            return read(prof.snapshot(kind)), time.time_ns()

        return self._delta(request, params, kind, collect)

    def _delta(
        self, request: Request, params: Dict[str, List[str]], name: str, collect
    ) -> Response:
        """Go's serveDeltaProfile: collect() now and after seconds, and
        answer the start scaled by -1 merged with the end."""
        from samprof.pprof import merge, scale, write

        try:
            seconds = self._seconds(params, None)
        except ValueError as e:
            return _error(400, str(e))
        if params.get("debug", ["0"])[0] not in ("", "0"):
            return _error(400, "seconds and debug params are incompatible")
        try:
            before, t0 = collect()
            if not self._wait(request, seconds):
                return _error(500, "context canceled")
            after, t1 = collect()
        except RuntimeError as e:
            return _error(500, f"failed to collect profile: {e}")
        delta = merge([scale(before, -1), after])
        delta.time_nanos = t1
        delta.duration_nanos = t1 - t0
        return _profile_response(f"{name}-delta", write(delta))

    # -- threads ---------------------------------------------------------------

    def _threads(self, request: Request, params: Dict[str, List[str]]) -> Response:
        """goroutine (alias threads): every thread's stack now; debug=1
        groups identical stacks, debug=2 dumps every thread and every
        asyncio task. seconds= gives a delta, as for Go's goroutine."""
        from samprof import _threads

        name = request.path.strip("/")
        if params.get("seconds", [""])[0] != "":

            def collect():
                from samprof.pprof import read

                snap = _threads.snapshot()
                return read(_threads.pprof(snap)), snap.time_ns

            return self._delta(request, params, name, collect)
        try:
            debug = _int_param(params, "debug") or 0
        except ValueError:
            debug = 0
        if debug >= 2:
            return _text_response(_threads.dump_text(_threads.snapshot(with_tasks=True)))
        snap = _threads.snapshot()
        if debug == 1:
            return _text_response(_threads.grouped_text(snap))
        return _profile_response(name, _threads.pprof(snap))

    # -- the rest ------------------------------------------------------------

    def _cmdline(self, request: Request, params: Dict[str, List[str]]) -> Response:
        argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
        return _text_response("\x00".join(argv))

    def _symbol(self, request: Request, params: Dict[str, List[str]]) -> Response:
        # samprof's locations carry their function and line, so pprof never
        # asks for addresses; "num_symbols: 1" tells it symbols exist.
        return _text_response("num_symbols: 1\n")

    def _index(self, request: Request, params: Dict[str, List[str]]) -> Response:
        names = sorted(name for name in self._routes if name and name != "symbol")
        rows = "".join(
            f"<tr><td><a href='{n}?debug=1'>{html.escape(n)}</a></td></tr>\n"
            if n in ("heap", "allocs")
            else f"<tr><td><a href='{n}'>{html.escape(n)}</a></td></tr>\n"
            for n in names
        )
        descriptions = "".join(
            f"<li><div class=profile-name>{html.escape(n)}: </div> "
            f"{html.escape(_DESCRIPTIONS.get(n, ''))}</li>\n"
            for n in names
        )
        page = (
            "<html>\n<head>\n<title>/debug/pprof/</title>\n<style>\n"
            ".profile-name{\n\tdisplay:inline-block;\n\twidth:6rem;\n}\n</style>\n</head>\n"
            "<body>\n/debug/pprof/<br>\n<br>\nTypes of profiles available:\n<table>\n"
            "<thead><td>Profile</td></thead>\n"
            f"{rows}</table>\n<br>\n<p>\nProfile Descriptions:\n<ul>\n{descriptions}"
            "</ul>\n</p>\n</body>\n</html>"
        )
        return _text_response(page, "text/html; charset=utf-8")


def _heap_text(data: bytes, kind: str) -> str:
    """heap?debug=1: the profile's samples as text, largest first, in the
    spirit of Go's legacy heap text (Go's own layout needs addresses)."""
    from samprof.pprof import read

    profile = read(data)
    index = profile.sample_type_index("inuse_space" if kind == "heap" else "alloc_space")
    lines = [f"{kind} profile: {len(profile.samples)} samples, rate {profile.period}"]
    for sample in sorted(profile.samples, key=lambda s: -s.values[index]):
        v = sample.values
        lines.append(f"{v[2]}: {v[3]} [{v[0]}: {v[1]}]")
        for frame in profile.stack_of(sample):
            lines.append(f"#\t{frame.function}\t{frame.filename}:{frame.line}")
        lines.append("")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# serve(): the endpoints on a server of their own, in a thread.

_LOOPBACK_NAMES = ("localhost",)


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _peer_closed(sock) -> bool:
    """Whether the client closed its side (it sent nothing more and hung
    up): a capture then ends early."""
    import select
    import socket

    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


class Server:
    """A running ``serve()``: ``url`` is the endpoints' base URL, ``host``
    and ``port`` where it listens, ``pid`` the process it serves;
    ``close()`` stops it (and the heap profile it started, if any). Also a
    context manager."""

    def __init__(
        self, httpd, endpoints: Endpoints, thread: threading.Thread, heap_profiler
    ) -> None:
        self._httpd = httpd
        self._endpoints = endpoints
        self._thread = thread
        self._heap_profiler = heap_profiler
        # The sockets of the requests being answered: a forked child closes
        # its copies, so that a client sees the end of its answer when this
        # process closes it.
        self._connections: "weakref.WeakSet[Any]" = httpd.connections
        self._discovery: Optional[str] = None
        self.pid = os.getpid()
        host, port = httpd.server_address[:2]
        self.host: str = host
        self.port: int = port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/debug/pprof/"
        _servers.add(self)

    def close(self) -> None:
        """Stop listening and wait for the server thread (captures in
        progress end at their next check)."""
        global _per_process
        if self._httpd is None:
            return
        if _per_process is not None and _per_process.get("root") is self:
            _per_process = None
        self._endpoints.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)
        self._httpd = None
        self._remove_discovery()
        prof, self._heap_profiler = self._heap_profiler, None
        if prof is not None and prof.running:
            prof.stop()

    def _forsake(self) -> None:
        """In a forked child: let go of the parent's server. Its thread did
        not follow the fork; its listening socket and connections did, and
        are closed here (the parent's stay open). The parent's discovery
        file and heap profile stay the parent's."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        for sock in [httpd.socket, *list(self._connections)]:
            try:
                sock.close()
            except OSError:
                pass
        self._discovery = None
        self._heap_profiler = None

    def _write_discovery(self) -> None:
        """Write this server's discovery file (see discovery_dir())."""
        directory = _private_dir(discovery_dir())
        if directory is None:
            return
        entry = {
            "pid": self.pid,
            "ppid": os.getppid(),
            "url": self.url,
            "host": self.host,
            "port": self.port,
            "token": self._endpoints._token is not None,
            "cmdline": _cmdline(),
            "started": time.time(),
            "start_ticks": _start_ticks(self.pid),
        }
        path = os.path.join(directory, f"{self.pid}.json")
        partial = f"{path}.{threading.get_ident()}.tmp"
        try:
            with open(partial, "w") as f:
                json.dump(entry, f)
            os.replace(partial, path)
        except OSError:
            return
        self._discovery = path

    def _remove_discovery(self) -> None:
        path, self._discovery = self._discovery, None
        if path is not None and self.pid == os.getpid():
            try:
                os.unlink(path)
            except OSError:
                pass

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<samprof.http.Server {self.url}>"


# The servers of this process (and, after a fork, those it inherited).
_servers: "weakref.WeakSet[Server]" = weakref.WeakSet()
# serve(per_process=True): the arguments each forked child serves with, the
# first server ("root"), the child's own server ("server": the reference
# that keeps it alive, as nobody else holds it) and the callback that
# announces it ("announce").
_per_process: Optional[Dict[str, Any]] = None
_fork_hook_registered = False


def serve(
    host: str = "127.0.0.1",
    port: int = 6060,
    *,
    token: Optional[str] = None,
    heap: bool = True,
    max_seconds: int = DEFAULT_MAX_SECONDS,
    max_connections: int = 8,
    timeout: float = 10.0,
    per_process: bool = False,
) -> Server:
    """Serve /debug/pprof/ from a thread of this process; return the
    :class:`Server` (its ``url``, ``close()``).

    Listens on loopback only unless a ``token`` is given: binding any
    other address without one raises ValueError. With a token every
    request must carry it (``Authorization: Bearer TOKEN`` or
    ``?token=TOKEN``). On loopback, the ``Host`` header must name the
    loopback address (DNS rebinding). ``port=0`` picks a free port.
    ``heap=True`` starts a heap profile (samprof.HeapProfiler, 512 KiB
    rate) unless one runs, so that ``heap`` and ``allocs`` answer as in Go,
    where heap sampling is always on; it costs a few percent on
    allocation-heavy code (README, "Heap profiles"), and ``heap=False``
    leaves it off. ``max_connections`` requests are served at once, more
    are refused with 503; a client idle for ``timeout`` seconds is cut.

    A forked child never serves on its parent's socket (it closes its
    copy). With ``per_process=True`` it serves on one of its own instead:
    every process forked from this one (a pre-fork server's workers,
    multiprocessing's fork workers, and their own forks) starts a server
    with the same settings on a free port of the same host, and each of
    them, this one included, writes a discovery file (see
    :func:`discovery_dir` and :func:`servers`).
    """
    settings = dict(
        token=token,
        heap=heap,
        max_seconds=max_seconds,
        max_connections=max_connections,
        timeout=timeout,
    )
    server = _start(host, port, **settings)
    _register_fork_hook()
    if per_process:
        global _per_process
        _per_process = {"host": host, "settings": settings, "root": server, "announce": None}
        server._write_discovery()
        servers()  # removes the files of processes that are gone
    return server


def _start(
    host: str,
    port: int,
    *,
    token: Optional[str],
    heap: bool,
    max_seconds: int,
    max_connections: int,
    timeout: float,
) -> Server:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    loopback = _is_loopback(host)
    if not loopback and token is None:
        raise ValueError(
            f"serving on {host!r}, which is not a loopback address, needs a token "
            "(serve(..., token=...)): anyone who can reach the port could profile this process"
        )
    endpoints = Endpoints(token=token, max_seconds=max_seconds)
    slots = threading.BoundedSemaphore(max_connections)

    class Handler(BaseHTTPRequestHandler):
        server_version = "samprof"
        protocol_version = "HTTP/1.0"
        # Headers and body go out in two writes: without TCP_NODELAY,
        # Nagle's algorithm may hold the second until the client ACKs the
        # first, which a client may delay.
        disable_nagle_algorithm = True

        def setup(self) -> None:
            self.timeout = timeout
            super().setup()

        def _answer(self) -> None:
            path, _, query = self.path.partition("?")
            prefix = "/debug/pprof"
            if not (path == prefix or path.startswith(prefix + "/")):
                response = _error(404, "Not found: the endpoints are under /debug/pprof/")
            else:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, 1 << 20)) if length > 0 else b""
                response = endpoints.handle(
                    Request(
                        path=path[len(prefix) :],
                        query=query,
                        method=self.command,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        body=body,
                        disconnected=lambda: _peer_closed(self.connection),
                    )
                )
            self.send_response(response.status)
            for key, value in response.headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        do_GET = do_POST = do_HEAD = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass  # a profiler's server says nothing (and never logs a token)

    class HTTPServer(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

        def process_request(self, request, client_address) -> None:
            if not slots.acquire(blocking=False):
                try:
                    request.sendall(
                        b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                        b"X-Go-Pprof: 1\r\n\r\ntoo many connections\n"
                    )
                except OSError:
                    pass
                self.shutdown_request(request)
                return
            self.connections.add(request)
            super().process_request(request, client_address)

        def handle_error(self, request, client_address) -> None:
            pass  # a client that hung up mid-answer is no news

        def process_request_thread(self, request, client_address) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                slots.release()

    if ":" in host and not host.startswith("["):
        import socket

        HTTPServer.address_family = socket.AF_INET6
    httpd = HTTPServer((host.strip("[]"), port), Handler)
    httpd.connections = weakref.WeakSet()
    bound_port = httpd.server_address[1]
    if loopback:
        endpoints.allowed_hosts = {
            f"{name}:{bound_port}" for name in ("127.0.0.1", "localhost", "[::1]")
        }
        if bound_port == 80:
            endpoints.allowed_hosts |= {"127.0.0.1", "localhost", "[::1]"}
    heap_profiler = _start_heap() if heap else None
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="samprof-http", daemon=True
    )
    server = Server(httpd, endpoints, thread, heap_profiler)
    thread.start()
    return server


def _register_fork_hook() -> None:
    # Registered by the first serve(), after the profilers' own fork hooks
    # (imported by then), which must run first in the child: they mark the
    # parent's profiles stopped, so that the child can start its own.
    global _fork_hook_registered
    if not _fork_hook_registered:
        _fork_hook_registered = True
        os.register_at_fork(after_in_child=_after_fork_in_child)
        atexit.register(_remove_discovery_files)


def _after_fork_in_child() -> None:
    global _per_process
    for server in list(_servers):
        server._forsake()
    if _per_process is None:
        return
    settings = _per_process["settings"]
    try:
        server = _start(_per_process["host"], 0, **settings)
    except Exception as e:  # noqa: BLE001 - never fail the program's fork
        # os.write, not print: a thread of the parent may have held
        # sys.stderr's lock at the fork, and no one would release it here.
        os.write(2, f"samprof: pid {os.getpid()}: cannot serve /debug/pprof/: {e}\n".encode())
        _per_process = None
        return
    _per_process = dict(_per_process, server=server)
    server._write_discovery()
    announce = _per_process["announce"]
    if announce is not None:
        announce(server)


def _remove_discovery_files() -> None:
    for server in list(_servers):
        server._remove_discovery()


def discovery_dir() -> str:
    """Where servers started with ``per_process=True`` (and by ``samprof
    serve``) write their discovery files, one ``PID.json`` each: the
    directory ``$SAMPROF_DISCOVERY_DIR`` if set, else ``samprof-UID`` in
    ``$XDG_RUNTIME_DIR`` (else the temporary directory). A file holds the
    process's pid, parent pid, URL, host, port, command line, whether a
    token is required (never the token) and when it started; the process
    removes it when its server closes or it exits normally."""
    configured = os.environ.get("SAMPROF_DISCOVERY_DIR")
    if configured:
        return configured
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return os.path.join(base, f"samprof-{os.getuid()}")


def _private_dir(path: str) -> Optional[str]:
    """``path``, made if missing, if it is a directory of this user's that
    no one else can write (others could plant entries in a shared one);
    else None, after saying why on stderr."""
    import stat

    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        problem = None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            problem = "not a directory of this user's that only this user can write"
    except OSError as e:
        problem = e.strerror or str(e)
    if problem is not None:
        # os.write: this may run in a forked child (see _after_fork_in_child).
        os.write(2, f"samprof: no discovery files: {path}: {problem}\n".encode())
        return None
    return path


def _start_ticks(pid: int) -> Optional[int]:
    """When the process started (clock ticks since boot, /proc/PID/stat): a
    pid reused by another process has another."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline() -> List[str]:
    """This process's command line as ps shows it (a pre-fork server may
    have retitled its workers), else sys.argv."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return list(sys.argv)
    return [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]


def _alive(entry: Dict[str, Any]) -> bool:
    pid = entry.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    ticks = _start_ticks(pid)
    return ticks is not None and ticks == entry.get("start_ticks")


def servers(directory: Optional[str] = None) -> List[Dict[str, Any]]:
    """The live servers' discovery entries (dicts, see
    :func:`discovery_dir`), by pid. Files of processes that are gone (an
    ``os._exit``, a kill) are removed on the way."""
    directory = directory or discovery_dir()
    found = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path) as f:
                entry = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(entry, dict) and _alive(entry):
            found.append(entry)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    return sorted(found, key=lambda e: e["pid"])


def _announce_forks(announce: Callable[[Server], None]) -> None:
    """Have each forked child of a ``serve(per_process=True)`` call
    ``announce`` with its server once it serves (``samprof serve`` prints
    the address)."""
    if _per_process is not None:
        _per_process["announce"] = announce


def _start_heap():
    """A heap profile for the endpoints, unless one runs already (whoever
    started it); the profiler started, or None."""
    from samprof._heap import HeapProfiler, _slot
    from samprof._profiler import ProfilerError

    if _slot.active is not None:
        return None
    prof = HeapProfiler()
    try:
        prof.start()
    except ProfilerError:  # started by another thread meanwhile
        return None
    return prof


class _HeapPerProcess:
    """For the mounted apps: a heap profile started in each process at its
    first request, unless one runs. A pre-fork server imports the app in
    its parent, whose heap profile would not follow a fork."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._pid: Optional[int] = None
        self._lock = threading.Lock()

    def ensure(self) -> None:
        import os

        if not self.enabled or self._pid == os.getpid():
            return
        with self._lock:
            if self._pid != os.getpid():
                _start_heap()
                self._pid = os.getpid()


class _MountedApp:
    """What the WSGI and ASGI applications share: their endpoints (no Host
    check: the application's own routing and auth apply), and a heap
    profile per process."""

    def __init__(
        self,
        *,
        token: Optional[str] = None,
        max_seconds: int = DEFAULT_MAX_SECONDS,
        heap: bool = True,
    ) -> None:
        self.endpoints = Endpoints(token=token, max_seconds=max_seconds)
        self.heap = _HeapPerProcess(heap)
