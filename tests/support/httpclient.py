"""Plain HTTP requests to the /debug/pprof endpoints, and the check of an
error as Go's net/http/pprof writes one (serveError)."""

from __future__ import annotations

import http.client
from typing import Dict, Optional, Tuple


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
