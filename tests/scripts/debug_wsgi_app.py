"""A WSGI application under samprof.wsgi.DebugMiddleware, for gunicorn.

/hello?name=N answers "<greeting>, <N>!" (the tests change the greeting
from the IDE); /fail raises KeyError inside and answers "recovered".
Environment: SAMPROF_TEST_IDE_PORT, where the IDE listens.
"""

from __future__ import annotations

import os
import urllib.parse

import samprof.wsgi


class Visitor:
    def __init__(self, name):
        self.name = name
        self.tags = {"langs": ["python", "go"], "level": 3}


def greet(visitor):
    greeting = "Hello"  # LINE greeting
    text = f"{greeting}, {visitor.name}!"  # LINE text
    return text  # LINE greet_return


def lookup(table, key):
    try:
        return table[key]  # LINE lookup
    except KeyError:
        return "recovered"


def hello(environ, start_response):
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    visitor = Visitor(query.get("name", ["world"])[0])  # LINE visitor
    if environ.get("PATH_INFO") == "/fail":
        body = lookup({}, "missing")
    else:
        body = greet(visitor)  # LINE call_greet
    start_response("200 OK", [("Content-Type", "text/plain")])  # LINE start_response
    return [body.encode()]  # LINE respond


app = samprof.wsgi.DebugMiddleware(
    hello, enabled=True, port=int(os.environ["SAMPROF_TEST_IDE_PORT"]), connect_timeout=2.0
)
