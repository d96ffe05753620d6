"""ASGI: :class:`ProfilerMiddleware`, which profiles an application's
requests (below), and the /debug/pprof endpoints as an ASGI application,
to mount inside an existing one (Starlette, FastAPI, Django's ASGI handler) so that they ride
on its port (and behind its auth)::

    import samprof.asgi
    from starlette.routing import Mount

    app.routes.append(Mount("/debug/pprof", app=samprof.asgi.PprofApp()))

Mounted (``root_path`` set, as Starlette's ``Mount`` does), or served as a
whole application at ``/debug/pprof/...``: both work. Each request runs in
the event loop's default executor, so a 30-second CPU capture holds a
worker thread, never the loop; a client that disconnects ends its capture.
The endpoints answer as :mod:`samprof.http` describes.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any, Awaitable, Callable, Dict, MutableMapping, Optional

from samprof._middleware import _DebugGated, set_route
from samprof.http import Request, Response, _MountedApp
from samprof.wsgi import _MAX_BODY, _sub_path

__all__ = ["DebugMiddleware", "PprofApp", "ProfilerMiddleware", "set_route"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Dict[str, Any]]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]


class PprofApp(_MountedApp):
    """An ASGI application serving /debug/pprof.

    ``token`` and ``max_seconds`` are :class:`samprof.http.Endpoints`'s;
    ``heap=True`` starts a heap profile in each process at its first
    request to the endpoints, unless one runs.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        self.heap.ensure()
        body = await _read_body(receive)
        gone = threading.Event()
        watcher = asyncio.ensure_future(_watch_disconnect(receive, gone))
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        request = Request(
            path=_sub_path(path),
            query=scope.get("query_string", b"").decode("latin-1"),
            method=scope.get("method", "GET"),
            headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]},
            body=body,
            disconnected=gone.is_set,
        )
        try:
            loop = asyncio.get_running_loop()
            response = await loop.run_in_executor(None, self.endpoints.handle, request)
        finally:
            watcher.cancel()
        if not gone.is_set():
            await _send(send, response, request.method == "HEAD")


async def _read_body(receive: Receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""
        chunk = message.get("body", b"")
        if size < _MAX_BODY:
            chunks.append(chunk[: _MAX_BODY - size])
            size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _watch_disconnect(receive: Receive, gone: threading.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


async def _send(send: Send, response: Response, head: bool) -> None:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    headers.append((b"content-length", str(len(response.body)).encode()))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else response.body})


async def _lifespan(receive: Receive, send: Send) -> None:
    """Served as a whole application: nothing to set up or tear down."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class ProfilerMiddleware:
    """Profiles the requests of an ASGI application; the options are
    :class:`samprof.wsgi.ProfilerMiddleware`'s (``when`` as a function
    gets the ASGI scope)::

        app = samprof.asgi.ProfilerMiddleware(app, profile_dir="/var/tmp/profiles")

    The labels of a request follow its task: requests whose coroutines take
    turns on one event loop are each charged for their own time. Starlette
    and FastAPI routes are found as the router picks them (``route`` is the
    route's path template); other applications name theirs with
    :func:`samprof.asgi.set_route`. This process's last files are written
    at the server's lifespan shutdown (uvicorn's workers end by a signal,
    without running ``atexit``).
    """

    def __init__(self, app: Callable[..., Any], **options: Any) -> None:
        from samprof._middleware import Profiling

        self.app = app
        self.profiling = Profiling(**options)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, self._watch_lifespan(receive), send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        profiling = self.profiling
        header = None
        if profiling.trigger:
            for key, value in scope.get("headers", ()):
                if key.decode("latin-1").lower() == profiling.trigger_header:
                    header = value.decode("latin-1")
                    break
        selected = profiling.select(scope, scope.get("query_string", b"").decode("latin-1"), header)
        if selected is None and not profiling.server_timing:
            await self.app(scope, receive, send)
            return
        await self._profiled(scope, receive, send, selected)

    def _watch_lifespan(self, receive: Receive) -> Receive:
        """The server's lifespan messages, passed on; at shutdown this
        process's last profile is written first (uvicorn then ends the
        process by the signal that stopped it, so atexit never runs)."""

        async def watched() -> Dict[str, Any]:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                self.profiling.shutdown()
            return message

        return watched

    async def _profiled(
        self, scope: Scope, receive: Receive, send: Send, selected: Optional[bool]
    ) -> None:
        """A request that is profiled (selected is not None; True: it is
        answered with its profile), or timed, or both."""
        from samprof._middleware import NO_PROFILE, Timing, profile_response, set_status

        profiling = self.profiling
        wants_profile = bool(selected)
        timing = Timing() if profiling.server_timing else None
        request = None
        if selected is not None:
            request = profiling.begin(
                scope.get("method", "GET"), scope.get("path", "/"), wants_profile
            )

        async def send_status(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                if request is not None:
                    set_status(request, int(message.get("status", 200)))
                if timing is not None:
                    value = timing.header().encode("latin-1")
                    headers = [*message.get("headers", ()), (b"server-timing", value)]
                    message = dict(message, headers=headers)
            if not wants_profile:
                await send(message)

        try:
            app = self.app(_RoutedScope(scope), receive, send_status)
            await (_TimedSteps(app, timing) if timing is not None else app)
        finally:
            data = None if request is None else profiling.end(request)
        if not wants_profile:
            return
        if data is None:
            response = Response(503, [("Content-Type", "text/plain")], NO_PROFILE)
            await _send(send, response, False)
            return
        accept = ""
        for key, value in scope.get("headers", ()):
            if key.decode("latin-1").lower() == "accept":
                accept = value.decode("latin-1")
        content_type, headers, payload = profile_response(data, accept, profiling.files_suffix)
        headers = [("Content-Type", content_type), *headers]
        if timing is not None:
            headers.append(("Server-Timing", timing.header()))
        await _send(send, Response(200, headers, payload), False)


class _TimedSteps:
    """Awaits a coroutine as ``await`` would, step by step, timing each step
    (Timing.enter/leave around it): the CPU and GC time of the request's own
    steps, not of the other requests' that run on the same loop between
    them."""

    def __init__(self, coroutine: Any, timing: Any) -> None:
        self._coroutine = coroutine
        self._timing = timing

    def __await__(self) -> Any:
        coroutine, timing = self._coroutine, self._timing
        if not hasattr(coroutine, "send"):  # another kind of awaitable
            coroutine = coroutine.__await__()
        value: Any = None
        error: Optional[BaseException] = None
        while True:
            timing.enter()
            try:
                if error is not None:
                    yielded = coroutine.throw(error)
                else:
                    yielded = coroutine.send(value)
            except StopIteration as stop:
                return stop.value
            finally:
                timing.leave()
            try:
                value, error = (yield yielded), None
            except BaseException as e:  # noqa: BLE001 - passed on to the coroutine
                value, error = None, e


class _RoutedScope(dict):
    """The scope, passed on as a dict that notices the router: Starlette
    (and FastAPI) set ``scope["route"]`` to the route they picked, or, in
    older versions, put its endpoint in; the request's samples then carry
    the route's path template."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        if key == "route":
            _route_found(getattr(value, "path", None))

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        added = dict(*args, **kwargs)
        path = getattr(added.get("route"), "path", None)
        if isinstance(path, str):
            _route_found(path)
            return
        endpoint = added.get("endpoint")
        if endpoint is None or isinstance(getattr(self.get("route"), "path", None), str):
            return  # nothing to find, or named already
        for route in getattr(self.get("app"), "routes", ()):
            if getattr(route, "endpoint", None) is endpoint:
                _route_found(getattr(route, "path", None))
                return


def _route_found(path: Any) -> None:
    if isinstance(path, str):
        set_route(path)


class DebugMiddleware(_DebugGated):
    """Runs an HTTP request under a DBGP debugger when it asks for one; the
    options and the trigger are :class:`samprof.wsgi.DebugMiddleware`'s::

        app = samprof.asgi.DebugMiddleware(app, enabled=True)

    A debugged request runs in a thread of its own, on an event loop of its
    own, with ``receive`` and ``send`` passed back to the server's loop: a
    request stopped at a breakpoint stops that thread only, and the
    server's loop goes on serving every other request. Code that shares
    loop-bound objects (a connection pool made on the server's loop)
    between requests may not work from the debugged request's loop.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.gate.enabled:
            await self.app(scope, receive, send)
            return
        cookies = ""
        for name, value in scope.get("headers", ()):
            if name == b"cookie":
                cookies = value.decode("latin-1")
        idekey = self.gate.idekey_of(scope.get("query_string", b"").decode("latin-1"), cookies)
        if idekey is None:
            await self.app(scope, receive, send)
            return
        await _debugged(self, idekey, scope, receive, send)


async def _debugged(
    middleware: DebugMiddleware, idekey: str, scope: Scope, receive: Receive, send: Send
) -> None:
    """One request under the debugger, in a thread and loop of its own."""
    from samprof import debug

    loop = asyncio.get_running_loop()
    # How the thread ended: "ok", "no session", "stopped", or the
    # application's exception.
    done: "asyncio.Future[object]" = loop.create_future()
    started = False

    async def send_here(message: Dict[str, Any]) -> None:
        nonlocal started
        if message.get("type") == "http.response.start":
            started = True
        await send(message)

    async def receive_here() -> Dict[str, Any]:
        # receive may return any awaitable, not only a coroutine.
        return await receive()

    async def receive_there() -> Dict[str, Any]:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(receive_here(), loop))

    async def send_there(message: Dict[str, Any]) -> None:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(send_here(message), loop))

    def finish(outcome: object) -> None:
        if not done.done():
            done.set_result(outcome)

    def run() -> None:
        outcome: object = "ok"
        try:
            session = middleware.gate.open(idekey, debug.app_uri(middleware.app))
            if session is None:
                outcome = "no session"
            else:
                session.call(asyncio.run, middleware.app(scope, receive_there, send_there))
        except debug.Stopped:
            outcome = "stopped"
        except BaseException as e:
            outcome = e
        try:
            loop.call_soon_threadsafe(finish, outcome)
        except RuntimeError:
            pass  # the server's loop is gone (shut down while debugging)

    # The request's context variables go with it.
    context = contextvars.copy_context()
    threading.Thread(
        target=context.run, args=(run,), name="samprof.debug request", daemon=True
    ).start()
    outcome = await done
    if isinstance(outcome, BaseException):
        # The server sees the application's error as it would have.
        raise outcome
    if outcome == "no session":
        await middleware.app(scope, receive, send)
    elif outcome == "stopped" and not started:
        await send(
            {
                "type": "http.response.start",
                "status": 500,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")],
            }
        )
        await send(
            {"type": "http.response.body", "body": b"The request was stopped from the debugger.\n"}
        )
