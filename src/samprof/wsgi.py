"""WSGI: :class:`ProfilerMiddleware`, which profiles an application's
requests (below), and the /debug/pprof endpoints as a WSGI application,
to mount inside an existing one so that they ride on its port (and behind
its auth)::

    import samprof.wsgi
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    app.wsgi_app = DispatcherMiddleware(
        app.wsgi_app, {"/debug/pprof": samprof.wsgi.PprofApp()}
    )

Mounted at ``/debug/pprof`` (``PATH_INFO`` is then ``/heap``), or served
as a whole application (``PATH_INFO`` ``/debug/pprof/heap``): both work.
The endpoints answer as :mod:`samprof.http` describes. A CPU or wall
capture holds its worker for ``seconds``: under a server with one request
per process at a time (gunicorn's sync worker), use a threaded worker or
``samprof.serve()`` for captures.
"""

from __future__ import annotations

import sys
from http import HTTPStatus
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from samprof._middleware import _DebugGated, set_route
from samprof.http import Request, _MountedApp

__all__ = ["DebugMiddleware", "PprofApp", "ProfilerMiddleware", "set_route"]

_MAX_BODY = 1 << 20
_PREFIX = "/debug/pprof"


def _sub_path(path: str) -> str:
    """The endpoint's name from a path below the mount point, or from a
    whole /debug/pprof/... path."""
    if path == _PREFIX or path.startswith(_PREFIX + "/"):
        path = path[len(_PREFIX) :]
    return path


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


class PprofApp(_MountedApp):
    """A WSGI application serving /debug/pprof.

    ``token`` and ``max_seconds`` are :class:`samprof.http.Endpoints`'s.
    ``heap=True`` starts a heap profile in each process at its first
    request to the endpoints, unless one runs (a pre-fork server's workers
    each get their own; start ``samprof.HeapProfiler`` in a post-fork hook
    to cover a worker from its start).
    """

    def __call__(
        self, environ: Dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        self.heap.ensure()
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        body = environ["wsgi.input"].read(min(length, _MAX_BODY)) if length > 0 else b""
        method = environ.get("REQUEST_METHOD", "GET")
        response = self.endpoints.handle(
            Request(
                path=_sub_path(environ.get("PATH_INFO", "")),
                query=environ.get("QUERY_STRING", ""),
                method=method,
                headers=headers,
                body=body,
            )
        )
        out: List[Tuple[str, str]] = list(response.headers)
        out.append(("Content-Length", str(len(response.body))))
        start_response(_status_line(response.status), out)
        return [] if method == "HEAD" else [response.body]


class ProfilerMiddleware:
    """Profiles the requests of a WSGI application::

        app.wsgi_app = samprof.wsgi.ProfilerMiddleware(
            app.wsgi_app, profile_dir="/var/tmp/profiles"
        )

    ``when``: which requests: ``"always"`` (the default: every request,
    and the sampler runs all the time), a fraction such as ``0.05``,
    ``"trigger"`` (requests with ``?samprof`` or an ``X-Samprof`` header;
    ``trigger_param``, ``trigger_header`` rename them, ``trigger_token``
    makes the value a secret to match), or a function of the WSGI environ
    returning a bool.

    ``backend``: ``"sampling"`` (samprof's sampler; ``mode="cpu"`` or
    ``"wall"``, ``hz``), ``"cprofile"`` (the standard library's cProfile:
    exact call counts, ``.prof`` pstats files; see
    :class:`samprof._middleware.CProfileBackend`), ``"labels"`` (no
    profiler of its own: the labels below go on the samples of whoever
    samples the process, e.g. :mod:`samprof.continuous`) or an object with
    the :class:`samprof.Backend` methods. Every sample of a profiled request carries its labels:
    ``route`` (the template the application names with
    :func:`samprof.wsgi.set_route`, else the path's first segment),
    ``method``, and, once the response started, ``status`` (``2xx``).

    ``profile_dir``: each process writes ``{name}.{pid}.{seq}.pb.gz``
    (``.prof`` for cProfile) there every ``flush_interval`` seconds (60)
    and at exit (SIGTERM included,
    unless the server handles SIGTERM itself, as gunicorn does, and then
    exits normally); ``samprof top DIR`` reads them all. A triggered
    request is answered with its own profile when ``respond_with_profile``
    (the default): the file, or for a browser a page with its top
    functions. Functions and blocks outside requests go to the same files
    with :class:`samprof.profiled`.

    ``server_timing=True`` adds a ``Server-Timing`` header to every
    response (profiled or not), which browsers' developer tools show: the
    request's wall time (``total``), the CPU time of its thread (``cpu``)
    and the time its thread spent in the cyclic garbage collector
    (``gc``), in milliseconds, up to the response's start.

    When no request is to be profiled (``when="trigger"`` and no trigger)
    and ``server_timing`` is off, a request costs a dictionary lookup.
    """

    def __init__(self, app: Callable[..., Any], **options: Any) -> None:
        from samprof._middleware import Profiling

        self.app = app
        self.profiling = Profiling(**options)

    def __call__(
        self, environ: Dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        profiling = self.profiling
        selected = profiling.select(
            environ,
            environ.get("QUERY_STRING", ""),
            environ.get(profiling.trigger_environ),
        )
        if selected is None and not profiling.server_timing:
            return self.app(environ, start_response)
        return self._profiled(environ, start_response, selected)

    def _profiled(
        self,
        environ: Dict[str, Any],
        start_response: Callable[..., Any],
        selected: Optional[bool],
    ) -> Iterable[bytes]:
        """A request that is profiled (selected is not None; True: it is
        answered with its profile), or timed, or both."""
        from samprof._middleware import NO_PROFILE, Timing, profile_response, set_status

        profiling = self.profiling
        wants_profile = bool(selected)
        timing = Timing() if profiling.server_timing else None
        if timing is not None:
            timing.enter()
        request = None
        if selected is not None:
            request = profiling.begin(
                environ.get("REQUEST_METHOD", "GET"),
                environ.get("PATH_INFO", "") or "/",
                wants_profile,
            )

        def start(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            if request is not None:
                try:
                    set_status(request, int(status.split(" ", 1)[0]))
                except ValueError:
                    pass
            if wants_profile:
                return lambda data: None  # the answer is the profile
            if timing is not None:
                headers = [*headers, ("Server-Timing", timing.header())]
            return start_response(status, headers, exc_info)

        def end() -> Optional[bytes]:
            if timing is not None:
                timing.leave()
            return None if request is None else profiling.end(request)

        try:
            body = self.app(environ, start)
        except BaseException:
            end()
            raise
        if not wants_profile:
            return _Body(body, end)
        try:
            for _ in body:
                pass
        finally:
            close = getattr(body, "close", None)
            try:
                if close is not None:
                    close()
            finally:
                data = end()
        if data is None:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [NO_PROFILE]
        content_type, headers, payload = profile_response(
            data, environ.get("HTTP_ACCEPT", ""), profiling.files_suffix
        )
        headers = [("Content-Type", content_type), ("Content-Length", str(len(payload)))] + headers
        if timing is not None:
            headers.append(("Server-Timing", timing.header()))
        start_response("200 OK", headers)
        return [payload]


class _Body:
    """The application's response body, passed through; the request ends
    (its labels and profile) when the server closes it, as PEP 3333 says
    it must, or when the body is used up."""

    def __init__(self, body: Iterable[bytes], end: Callable[[], Any]) -> None:
        self._body = body
        self._end: Any = end

    def __iter__(self) -> Any:
        try:
            yield from self._body
        except BaseException:
            self._finish()
            raise

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._finish()

    def _finish(self) -> None:
        end, self._end = self._end, None
        if end is not None:
            end()


class DebugMiddleware(_DebugGated):
    """Runs a request under a DBGP debugger when it asks for one::

        app.wsgi_app = samprof.wsgi.DebugMiddleware(app.wsgi_app, enabled=True)

    A request with ``?XDEBUG_SESSION_START=<idekey>`` or the cookie
    ``XDEBUG_SESSION=<idekey>`` (what the IDEs' browser extensions set)
    connects to the IDE listening at ``host``:``port`` (127.0.0.1:9003) and
    runs there under :mod:`samprof.debug`, which traces the thread serving
    it alone: the IDE sets breakpoints, steps, reads and sets variables.
    The response body is produced under the debugger too and sent when the
    session ends, so a streamed response arrives whole. Every other request
    runs untouched. If no IDE answers within ``connect_timeout`` (0.5 s) the
    request runs normally and a warning is logged; an IDE that goes away
    mid-request leaves the request to finish. ``stop`` from the IDE ends
    the request with a 500 response.

    Off unless ``enabled`` (or ``SAMPROF_DEBUG=1``), and it refuses to turn
    on where the environment says production (:class:`samprof.debug.Gate`
    lists the variables) unless ``force``: ``eval`` and ``property_set`` in
    the IDE run any code in the server. For development only.
    """

    def __call__(
        self, environ: Dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        idekey = self.gate.idekey_of(
            environ.get("QUERY_STRING", ""), environ.get("HTTP_COOKIE", "")
        )
        if idekey is None:
            return self.app(environ, start_response)
        from samprof import debug

        session = self.gate.open(idekey, debug.app_uri(self.app))
        if session is None:
            return self.app(environ, start_response)
        started: List[bool] = []

        def starting(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            started.append(True)
            return start_response(status, headers, exc_info)

        def respond() -> List[bytes]:
            body = self.app(environ, starting)
            try:
                return list(body)
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()

        try:
            return session.call(respond)
        except debug.Stopped:
            # Nothing was sent yet (the body is made whole first): the
            # response becomes a 500, replacing any headers the
            # application gave, as start_response allows with exc_info.
            start_response(
                "500 Internal Server Error",
                [("Content-Type", "text/plain; charset=utf-8")],
                sys.exc_info() if started else None,
            )
            return [b"The request was stopped from the debugger.\n"]
