"""The small web applications of the web benchmark, as a server loads them.

``flask_app`` runs under gunicorn, ``starlette_app`` under uvicorn. Both
answer ``/items/<n>`` with a page of n items built the way a small handler
builds one (a row per item, a few function calls each, JSON at the end), and
``/_cpu`` with the serving process's pid and CPU time, which the harness
reads before and after the load. ``SAMPROF_BENCH_WEB_VARIANT`` says how the
application is profiled (see web.VARIANTS); ``SAMPROF_BENCH_WEB_DIR`` is
where profiles go.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List

VARIANT = os.environ.get("SAMPROF_BENCH_WEB_VARIANT", "none")
PROFILE_DIR = os.environ.get("SAMPROF_BENCH_WEB_DIR", "")


def _price(i: int) -> float:
    return round(9.99 + (i * 37 % 101) / 7.0, 2)


def _tags(i: int) -> List[str]:
    return [f"tag-{(i * k) % 13}" for k in range(1, 4)]


def _row(i: int) -> Dict[str, Any]:
    name = f"item {i:05d}"
    return {
        "id": i,
        "name": name.title(),
        "slug": name.replace(" ", "-"),
        "price": _price(i),
        "tags": _tags(i),
        "in_stock": i % 3 != 0,
    }


def render_items(n: int) -> str:
    rows = [_row(i) for i in range(n)]
    total = sum(row["price"] for row in rows if row["in_stock"])
    return json.dumps({"items": rows, "total": round(total, 2), "count": len(rows)})


def cpu_body() -> str:
    return json.dumps({"pid": os.getpid(), "cpu": time.process_time()})


# -- Flask (WSGI) ------------------------------------------------------------


def _make_flask() -> Any:
    from flask import Flask, Response

    app = Flask("benchwebapp")

    @app.route("/items/<int:n>")
    def items(n: int) -> Any:
        return Response(render_items(n), mimetype="application/json")

    @app.route("/_cpu")
    def cpu() -> Any:
        return Response(cpu_body(), mimetype="application/json")

    if VARIANT == "pyinstrument":
        # pyinstrument's documented recipe for Flask ("Profile a web request
        # in Flask"): ?profile answers with the request's HTML report.
        from flask import g, make_response, request
        from pyinstrument import Profiler

        @app.before_request
        def before_request() -> None:
            if "profile" in request.args:
                g.profiler = Profiler()
                g.profiler.start()

        @app.after_request
        def after_request(response: Any) -> Any:
            if not hasattr(g, "profiler"):
                return response
            g.profiler.stop()
            return make_response(g.profiler.output_html())

        return app
    if VARIANT == "werkzeug":
        # werkzeug's ProfilerMiddleware: cProfile around every request, one
        # .prof file per request in profile_dir.
        from werkzeug.middleware.profiler import ProfilerMiddleware

        app.wsgi_app = ProfilerMiddleware(app.wsgi_app, stream=None, profile_dir=PROFILE_DIR)
        return app
    if VARIANT.startswith("samprof"):
        from flask import request

        import samprof.wsgi

        app.wsgi_app = samprof.wsgi.ProfilerMiddleware(app.wsgi_app, **samprof_options())

        @app.before_request
        def name_the_route() -> None:
            if request.url_rule is not None:
                samprof.set_route(request.url_rule.rule)

    return app


# -- Starlette (ASGI) --------------------------------------------------------


def _make_starlette() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def items(request: Any) -> Any:
        return Response(render_items(request.path_params["n"]), media_type="application/json")

    async def cpu(request: Any) -> Any:
        return Response(cpu_body(), media_type="application/json")

    app = Starlette(
        routes=[Route("/items/{n:int}", items), Route("/_cpu", cpu)],
    )
    if VARIANT == "pyinstrument":
        # pyinstrument's documented recipe for FastAPI ("Profile a web
        # request in FastAPI"), an http middleware, as Starlette spells it.
        from pyinstrument import Profiler
        from starlette.middleware.base import BaseHTTPMiddleware
        from starlette.responses import HTMLResponse

        async def profile_request(request: Any, call_next: Any) -> Any:
            if request.query_params.get("profile", False) is not False:
                profiler = Profiler(async_mode="enabled")
                profiler.start()
                await call_next(request)
                profiler.stop()
                return HTMLResponse(profiler.output_html())
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=profile_request)
        return app
    if VARIANT.startswith("samprof"):
        import samprof.asgi

        return samprof.asgi.ProfilerMiddleware(app, **samprof_options())
    return app


def samprof_options() -> Dict[str, Any]:
    options: Dict[str, Any] = {"profile_dir": PROFILE_DIR}
    if VARIANT == "samprof-off":
        options["when"] = "trigger"
    elif VARIANT == "samprof-100hz":
        options.update(when="always", hz=100)
    elif VARIANT == "samprof-triggered":
        options.update(when="trigger", hz=1000)
    elif VARIANT == "samprof-cprofile":
        options.update(when="always", backend="cprofile")
    else:
        raise ValueError(f"unknown variant {VARIANT!r}")
    return options


def __getattr__(name: str) -> Any:
    # Built on first use, so that importing this module for one server does
    # not import the other's framework.
    if name == "flask_app":
        value = _make_flask()
    elif name == "starlette_app":
        value = _make_starlette()
    else:
        raise AttributeError(name)
    globals()[name] = value
    return value
