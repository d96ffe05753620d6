"""The endpoints mounted inside web applications on real servers from
PyPI: samprof.wsgi.PprofApp under waitress, samprof.asgi.PprofApp under
uvicorn (tests/scripts/http_mounted_target.py), read by `go tool pprof`.
"""

from __future__ import annotations

import contextlib
import socket
import time

import pytest
from support.httpclient import assert_go_error, capture_becomes_free, get, script_process
from support.profiles import go_pprof_files

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds


@contextlib.contextmanager
def mounted(kind: str, seconds: float = 60):
    with script_process("http_mounted_target.py", kind, str(seconds)) as info:
        yield info["port"]


@pytest.mark.parametrize("kind", ["waitress", "uvicorn"])
def test_mounted_app_serves_go_tool_pprof(kind):
    with mounted(kind) as port:
        base = f"http://127.0.0.1:{port}/debug/pprof/"
        out = go_pprof_files([base + "profile?seconds=1"], "-top", "-nodecount=200")
        assert "cpu_load_for_http" in out, out
        # The heap profile started with the first request above: what the
        # load holds was allocated before it, what it churns after.
        out = go_pprof_files([base + "allocs"], "-top", "-nodecount=200")
        assert "alloc_load_for_http" in out, out
        status, headers, body = get(port, "/debug/pprof/heap")
        assert status == 200
        assert headers["content-disposition"] == 'attachment; filename="heap"'
        assert headers["x-content-type-options"] == "nosniff"
        assert_go_error(*get(port, "/debug/pprof/nosuch"), 404, "Unknown profile")
        status, _, body = get(port, "/debug/pprof/")
        assert status == 200 and b"Types of profiles available" in body
        # The application's own routes are untouched.
        assert get(port, "/hello")[2] == b"app\n"


def test_asgi_disconnect_ends_the_capture():
    with mounted("uvicorn") as port:
        first = socket.create_connection(("127.0.0.1", port), timeout=10)
        first.sendall(
            b"GET /debug/pprof/profile?seconds=60 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        time.sleep(0.5)
        first.close()
        capture_becomes_free(port)
