"""Django: name each request's route for samprof's middleware.

Add it to ``MIDDLEWARE`` (anywhere) and wrap the WSGI or ASGI application
in samprof's ``ProfilerMiddleware``::

    # settings.py
    MIDDLEWARE = ["samprof.django.RouteMiddleware", ...]

    # wsgi.py
    import samprof.wsgi
    application = samprof.wsgi.ProfilerMiddleware(get_wsgi_application(), profile_dir=...)

Once Django resolved the URL, the request's samples carry the route
pattern as their ``route`` label (``/items/<int:n>/``), not the path. This
module does not import Django.
"""

from __future__ import annotations

from typing import Any, Callable

from samprof._middleware import set_route

__all__ = ["RouteMiddleware"]


class RouteMiddleware:
    """A Django middleware that tells samprof the route of each request
    (``request.resolver_match.route``) before its view runs."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        return self.get_response(request)

    def process_view(self, request: Any, view_func: Any, view_args: Any, view_kwargs: Any) -> None:
        match = getattr(request, "resolver_match", None)
        route = getattr(match, "route", None)
        if route:
            set_route(route if route.startswith("/") else "/" + route)
        return None
