"""A WSGI application for gunicorn under `samprof serve`: /work burns CPU
in serve_app_work, anything else answers at once."""

from __future__ import annotations


def serve_app_work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def app(environ, start_response):
    body = b"ok\n"
    if environ.get("PATH_INFO") == "/work":
        body = str(serve_app_work(200_000)).encode() + b"\n"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
