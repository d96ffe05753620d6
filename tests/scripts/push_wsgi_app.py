"""A WSGI application for gunicorn that profiles itself continuously.

The agent starts when the module is imported, its settings from the
SAMPROF_PUSH_* variables: with --preload that is in gunicorn's master,
and each worker forked from it runs an agent of its own. The middleware
(backend="labels") only labels each request's samples with its route.
/work/<n> burns about 20 ms of CPU in handle_work.
"""

from __future__ import annotations

from support.workloads import burn_cpu

import samprof.continuous
import samprof.wsgi


def handle_work() -> None:
    burn_cpu(0.02)


def application(environ, start_response):
    if environ.get("PATH_INFO", "").startswith("/work/"):
        samprof.wsgi.set_route("/work/{n}")
        handle_work()
    body = b"ok\n"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


samprof.continuous.start()
app = samprof.wsgi.ProfilerMiddleware(application, backend="labels")
