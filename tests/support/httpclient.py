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
def serving_process(
    seconds: float = 60, loads: str = "cpu,alloc,asyncio", **serve_kwargs: Any
) -> Iterator[Served]:
    """tests/scripts/http_target.py, a process under load (loads: which of
    its load threads run) with samprof.serve(port=0, **serve_kwargs) on. It ends when the block does
    (its stdin closes), after seconds at the latest, and is killed if it
    does not end 30 s later; it must exit cleanly."""
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "http_target.py")
    p = subprocess.Popen(
        [sys.executable, script, str(seconds), json.dumps(serve_kwargs), loads],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(p.stdout.readline())
        yield Served(info["url"], info["port"], info["pid"])
    finally:
        p.stdin.close()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert p.returncode == 0, f"http_target.py exited {p.returncode}"
