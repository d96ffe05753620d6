"""The /debug/pprof endpoints as a WSGI application, to mount inside an
existing one so that they ride on its port (and behind its auth)::

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

from http import HTTPStatus
from typing import Any, Callable, Dict, Iterable, List, Tuple

from samprof.http import Request, _MountedApp

__all__ = ["PprofApp"]

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
