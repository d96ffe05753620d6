"""Two profile sessions alive at once, as a heap profile beside an
on-demand CPU profile will be: code objects die while both hold them, and
each session still names every frame right. The C core's test hooks drive
two sessions of collect.c directly (the profilers use a third); under the
sanitizer run ASan watches the death path."""

from __future__ import annotations

import gc
from typing import Dict, List

import pytest
from support import SANITIZED

from samprof import _core
from samprof.pprof import read


def make_codes(prefix: str, n: int) -> List:
    """n fresh code objects, each of a function named prefix_i."""
    codes = []
    for i in range(n):
        namespace: Dict[str, object] = {}
        exec(compile(f"def {prefix}_{i}():\n    return {i}\n", f"<{prefix}>", "exec"), namespace)
        codes.append(namespace[f"{prefix}_{i}"].__code__)  # type: ignore[attr-defined]
    return codes


def add(which: int, codes: List) -> None:
    for code in codes:
        _core._test_session_add(which, code, 0)


def names(data: bytes) -> Dict[str, int]:
    p = read(data)
    out: Dict[str, int] = {}
    for s in p.samples:
        for frame in p.stack_of(s):
            out[frame.function] = out.get(frame.function, 0) + s.values[0]
    return out


def kill(codes: List) -> List[int]:
    """Drops the last references to codes; returns their addresses."""
    addresses = [id(c) for c in codes]
    codes.clear()
    gc.collect()
    return addresses


def test_code_death_reaches_every_live_session() -> None:
    n = 300
    _core._test_session_open(0)
    _core._test_session_open(1)
    try:
        old = make_codes("old", n)
        add(0, old)
        add(1, old)
        old_addresses = set(kill(old))
        # New code objects, often at the dead ones' addresses: a session
        # that was not told of the deaths would name them old_i.
        new = make_codes("new", n)
        reused = sum(id(c) in old_addresses for c in new)
        add(0, new)
        add(1, new)
        first = _core._test_session_close(0)

        # Session 1 alone: still told of deaths after session 0 closed.
        newer_addresses = set(kill(new))
        newest = make_codes("newest", n)
        reused_alone = sum(id(c) in newer_addresses for c in newest)
        add(1, newest)
        second = _core._test_session_close(1)
    finally:
        for which in (0, 1):
            try:
                _core._test_session_close(which)
            except RuntimeError:
                pass

    if not SANITIZED:
        # pymalloc hands freed code objects' memory to new ones; ASan
        # quarantines it (and checks every access instead).
        assert reused > n // 4 and reused_alone > n // 4, (reused, reused_alone)
    want_first = {f"old_{i}": 1 for i in range(n)} | {f"new_{i}": 1 for i in range(n)}
    assert names(first) == want_first
    want_second = want_first | {f"newest_{i}": 1 for i in range(n)}
    assert names(second) == want_second


def test_sessions_beside_a_running_profiler() -> None:
    """A test session opened and closed while the CPU profiler's session
    runs leaves the profiler's profile whole."""
    from support.workloads import burn_python_for

    import samprof

    with samprof.CPUProfiler(hz=500) as prof:
        _core._test_session_open(0)
        codes = make_codes("side", 50)
        add(0, codes)
        burn_python_for(0.1)
        kill(codes)
        side = _core._test_session_close(0)
        burn_python_for(0.1)
    assert names(side) == {f"side_{i}": 1 for i in range(50)}
    assert "burn_python_for" in names(prof.result)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: _core._test_session_open(2), ValueError),
        (lambda: _core._test_session_add(0, make_codes("x", 1)[0], 0), RuntimeError),
        (lambda: _core._test_session_close(1), RuntimeError),
    ],
)
def test_test_hooks_refuse_misuse(call, error) -> None:
    with pytest.raises(error):
        call()
