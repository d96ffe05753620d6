"""samprof.serve(): Go's /debug/pprof endpoints from a process under load
(tests/scripts/http_target.py), read by the real `go tool pprof` and
checked header by header against Go's net/http/pprof (docs/design.md §9).

Every target process is bounded: it exits when the test closes its stdin,
or after its own deadline, and is killed if it outlives the test.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse

import pytest
from support.httpclient import assert_go_error, capture_becomes_free, get, serving_process
from support.profiles import check_profile, go_pprof_files

import samprof
from samprof.http import Endpoints, Request

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds


@pytest.fixture(scope="module")
def loaded():
    with serving_process(120) as t:
        yield t


# -- go tool pprof against the endpoints ----------------------------------


@pytest.mark.parametrize(
    "path, function, args",
    [
        ("profile?seconds=1", "cpu_load_for_http", ()),
        ("wall?seconds=1", "cpu_load_for_http", ()),
        ("heap", "alloc_load_for_http", ()),
        ("allocs", "alloc_load_for_http", ()),
        # What the load holds is steady: its in-use delta is about 0, what
        # it allocated in the 2 s is not.
        ("heap?seconds=1", "alloc_load_for_http", ("-sample_index=alloc_space",)),
    ],
)
def test_go_tool_pprof_reads_every_endpoint(loaded, path, function, args):
    url, _, _ = loaded
    out = go_pprof_files([url + path], "-top", "-nodecount=200", *args)
    assert function in out, out


def test_heap_delta_covers_the_interval(loaded):
    """allocs?seconds=2: what was allocated in those 2 s (end minus start),
    a fraction of everything allocated since the process began."""
    url, port, _ = loaded
    status, headers, delta = get(port, "/debug/pprof/allocs?seconds=1")
    assert status == 200
    assert headers["content-disposition"] == 'attachment; filename="allocs-delta"'
    status, _, total = get(port, "/debug/pprof/allocs")
    d = check_profile(delta).by_function("alloc_space").get("alloc_load_for_http", 0)
    t = check_profile(total).by_function("alloc_space").get("alloc_load_for_http", 0)
    assert 0 < d < t


def test_goroutine_profile_and_texts(loaded):
    """goroutine (and its alias threads): a pprof of every thread's stack
    that go tool pprof reads; debug=1 groups identical stacks; debug=2
    dumps every thread and every asyncio task with its coroutine stack."""
    url, port, _ = loaded
    out = go_pprof_files([url + "goroutine"], "-top", "-nodecount=200")
    assert "Type: goroutine" in out and "cpu_load_for_http" in out, out
    status, headers, body = get(port, "/debug/pprof/threads")
    assert status == 200 and headers["content-disposition"] == 'attachment; filename="threads"'
    view = check_profile(body)
    assert view.types == [("goroutine", "count")]
    text = get(port, "/debug/pprof/goroutine?debug=1")[2].decode()
    assert text.startswith("goroutine profile: total ")
    assert "1 @ cpu-load\n" in text
    dump = get(port, "/debug/pprof/goroutine?debug=2")[2].decode()
    assert "[cpu-load, non-daemon]:" in dump and "cpu_load_for_http(...)" in dump
    tasks = [block for block in dump.split("\n\n") if block.startswith("task ")]
    assert len(tasks) == 3, dump  # two waiting tasks and the one gathering them
    assert sum("coroutine waiting_task_for_http" in t for t in tasks) == 2
    assert all("loop in thread event-loop" in t for t in tasks)
    status, headers, _ = get(port, "/debug/pprof/goroutine?seconds=1")
    assert status == 200
    assert headers["content-disposition"] == 'attachment; filename="goroutine-delta"'


# -- Go's headers, statuses and error texts -------------------------------


def test_profile_headers_and_content(loaded):
    _, port, _ = loaded
    status, headers, body = get(port, "/debug/pprof/profile?seconds=1&hz=200")
    assert status == 200
    assert headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"] == 'attachment; filename="profile"'
    assert headers["x-content-type-options"] == "nosniff"
    assert "content-encoding" not in headers
    view = check_profile(body)
    assert view.msg.period == 5_000_000  # 200 Hz


def test_index_cmdline_symbol(loaded):
    _, port, _ = loaded
    status, headers, body = get(port, "/debug/pprof/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    for name in ("profile", "wall", "heap", "allocs", "cmdline"):
        assert f"href='{name}" in body.decode()
    status, headers, body = get(port, "/debug/pprof/cmdline")
    assert status == 200 and headers["content-type"] == "text/plain; charset=utf-8"
    assert b"http_target.py\x00" in body
    status, _, body = get(port, "/debug/pprof/symbol")
    assert status == 200 and body == b"num_symbols: 1\n"


def test_go_error_texts(loaded):
    _, port, _ = loaded
    assert_go_error(*get(port, "/debug/pprof/nosuch"), 404, "Unknown profile")
    assert_go_error(
        *get(port, "/debug/pprof/heap?seconds=x"),
        400,
        'invalid value for "seconds" - must be a positive integer',
    )
    assert_go_error(
        *get(port, "/debug/pprof/heap?seconds=-1"),
        400,
        'invalid value for "seconds" - must be a positive integer',
    )
    assert_go_error(
        *get(port, "/debug/pprof/heap?seconds=1&debug=1"),
        400,
        "seconds and debug params are incompatible",
    )
    assert_go_error(
        *get(port, "/debug/pprof/profile?seconds=301"),
        400,
        "profile duration exceeds the server's limit of 300 seconds",
    )


def test_heap_debug_text(loaded):
    _, port, _ = loaded
    status, headers, body = get(port, "/debug/pprof/heap?debug=1&gc=1")
    assert status == 200 and headers["content-type"] == "text/plain; charset=utf-8"
    text = body.decode()
    assert text.startswith("heap profile: ") and "alloc_load_for_http" in text


def test_second_cpu_capture_is_refused_and_disconnect_ends_the_first(loaded):
    """While one capture runs, another gets Go's 500; a client that hangs
    up ends its capture early, so the next one can start."""
    _, port, _ = loaded
    first = socket.create_connection(("127.0.0.1", port), timeout=10)
    first.sendall(
        b"GET /debug/pprof/profile?seconds=60 HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n" % port
    )
    time.sleep(0.5)
    assert_go_error(
        *get(port, "/debug/pprof/wall?seconds=1"),
        500,
        "Could not enable wall-clock profiling: cpu profiling already in use",
    )
    first.close()
    capture_becomes_free(port)


# -- security --------------------------------------------------------------


def test_host_header_must_be_loopback(loaded):
    _, port, _ = loaded
    assert_go_error(
        *get(port, "/debug/pprof/cmdline", {"Host": f"evil.example:{port}"}),
        403,
        "Host not allowed",
    )
    status, _, _ = get(port, "/debug/pprof/cmdline", {"Host": f"localhost:{port}"})
    assert status == 200


def test_token():
    with serving_process(60, token="s3cret-token") as (url, port, _):
        status, headers, body = get(port, "/debug/pprof/cmdline")
        assert status == 401 and headers["www-authenticate"] == "Bearer"
        assert b"s3cret" not in body
        status, _, _ = get(port, "/debug/pprof/cmdline", {"Authorization": "Bearer wrong"})
        assert status == 401
        status, _, _ = get(port, "/debug/pprof/cmdline", {"Authorization": "Bearer s3cret-token"})
        assert status == 200
        status, _, _ = get(port, "/debug/pprof/cmdline?token=s3cret-token")
        assert status == 200
        out = go_pprof_files([url + "heap?token=s3cret-token"], "-top")
        assert "alloc_load_for_http" in out


def test_non_loopback_needs_a_token():
    with pytest.raises(ValueError, match="not a loopback address, needs a token"):
        samprof.serve("0.0.0.0", 0)


def test_heap_endpoints_without_a_heap_profile():
    """serve(heap=False) in a process with no heap profile: 404 with the
    reason."""
    with serving_process(60, heap=False) as (_, port, _):
        status, headers, body = get(port, "/debug/pprof/heap")
        assert status == 404 and headers["x-go-pprof"] == "1"
        assert b"no heap profile is running" in body


def test_endpoints_core_never_raises():
    """A failure inside an endpoint is a 500 with its text."""
    e = Endpoints()
    e._routes["boom"] = lambda r, p: 1 / 0
    r = e.handle(Request("boom"))
    assert r.status == 500 and r.body == b"ZeroDivisionError: division by zero\n"
    assert "token" not in repr(Endpoints(token="abc")).replace("token=", "")
    assert e.handle(Request("profile", method="DELETE")).status == 405


def test_connection_cap():
    """More simultaneous connections than max_connections: 503."""
    with serving_process(60, max_connections=2) as (_, port, _):
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        for s in held:
            s.sendall(b"GET /debug/pprof/profile?seconds=3 HTTP/1.0\r\n")  # headers unfinished
        time.sleep(0.3)
        status, _, body = get(port, "/debug/pprof/cmdline")
        assert status == 503 and body == b"too many connections\n"
        for s in held:
            s.close()


def test_serve_in_process_url_and_close():
    server = samprof.serve(port=0, heap=False)
    try:
        assert server.url == f"http://127.0.0.1:{server.port}/debug/pprof/"
        parsed = urllib.parse.urlsplit(server.url)
        status, _, _ = get(parsed.port, "/debug/pprof/cmdline")
        assert status == 200
    finally:
        server.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2)
    assert not any(t.name == "samprof-http" for t in threading.enumerate())
