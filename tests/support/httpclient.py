"""Plain HTTP requests to the /debug/pprof endpoints, the check of an
error as Go's net/http/pprof writes one (serveError), and a process that
serves them under load."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, NamedTuple, Optional, Tuple


def get(
    port: int, path: str, headers: Optional[Dict[str, str]] = None, timeout: float = 30
) -> Tuple[int, Dict[str, str], bytes]:
    """GET path from 127.0.0.1:port: (status, headers with lower-case
    names, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def assert_go_error(
    status: int, headers: Dict[str, str], body: bytes, want_status: int, text: str
) -> None:
    """An error as Go's serveError writes it: the status, plain text
    ending in a newline, X-Go-Pprof: 1 (so go tool pprof prints it)."""
    assert status == want_status, (status, body)
    assert headers["x-go-pprof"] == "1"
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert headers["x-content-type-options"] == "nosniff"
    assert body.decode() == text + "\n"


class Served(NamedTuple):
    url: str  # the endpoints' base URL, ending in /debug/pprof/
    port: int
    pid: int


@contextlib.contextmanager
def script_process(name: str, *args: str) -> Iterator[Dict[str, Any]]:
    """tests/scripts/NAME run with ARGS; yields the JSON line it prints
    first. It ends when the block does (its stdin closes), is killed if it
    does not end 30 s later, and must exit cleanly."""
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", name)
    p = subprocess.Popen(
        [sys.executable, script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield json.loads(p.stdout.readline())
    finally:
        p.stdin.close()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert p.returncode == 0, f"{name} exited {p.returncode}"


@contextlib.contextmanager
def serving_process(
    seconds: float = 60, loads: str = "cpu,alloc,asyncio", **serve_kwargs: Any
) -> Iterator[Served]:
    """tests/scripts/http_target.py, a process under load (loads: which of
    its load threads run) with samprof.serve(port=0, **serve_kwargs) on,
    for seconds at most (script_process bounds it)."""
    with script_process("http_target.py", str(seconds), json.dumps(serve_kwargs), loads) as info:
        yield Served(info["url"], info["port"], info["pid"])


def capture_becomes_free(port: int, seconds: float = 5) -> None:
    """Waits until a 1 s CPU capture succeeds: a capture whose client hung
    up must end (and free the one capture slot) within seconds."""
    start = time.monotonic()
    while get(port, "/debug/pprof/profile?seconds=1")[0] != 200:
        assert time.monotonic() - start < seconds, "the hung-up capture did not end"
        time.sleep(0.2)
