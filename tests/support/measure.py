"""Statistical tests measure again, for longer, before they fail.

A profile is a sample: on a busy machine one run of a few hundred
milliseconds can land outside any honest tolerance. Go's runtime/pprof tests
answer this the same way (testCPUProfile doubles the duration, up to a
limit, because "profiling tests are inherently flaky, especially on a
loaded system"): the measurement is retried, the verdict never is. A
profiler that is really off misses at every length and still fails
(tests/support/test_measure.py proves it).

A statistical test is marked ``@pytest.mark.accuracy`` and written as a
function of a duration scale::

    @pytest.mark.accuracy
    def test_something():
        def attempt(scale):
            ... run for 1.0 * scale seconds ...
            within(got, want, 3, "main thread share, pp")

        measure(attempt)

Each ``within`` states a tolerance that comes from the spread measured for
that test (its docstring gives min/median/max of |error| over at least 20
runs on a 2-core VM, printed by ``make spread``).

Environment:
  SAMPROF_ACCURACY=short   start at half the duration (CI, on every
                           Python); default full.
  SAMPROF_RETRIES=N        retries after the first attempt (default 2).
  SAMPROF_SPREAD_LOG=FILE  append every comparison to FILE as a JSON line
                           (what ``make spread`` reads).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, List, Tuple

SHORT = os.environ.get("SAMPROF_ACCURACY", "full") == "short"
RETRIES = int(os.environ.get("SAMPROF_RETRIES", "2"))
SPREAD_LOG = os.environ.get("SAMPROF_SPREAD_LOG")

# (test id, attempt, scale, seconds, why it missed): shown by tests/conftest.py at
# the end of the run, so retries that ended in a pass are visible too.
RETRIED: List[Tuple[str, int, float, float, str]] = []


class Miss(AssertionError):
    """A measurement outside its tolerance."""


def _test_id() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]


def _log(what: str, error: float, tol: float, unit: str) -> None:
    if not SPREAD_LOG:
        return
    with open(SPREAD_LOG, "a") as f:
        f.write(
            json.dumps({"test": _test_id(), "what": what, "error": error, "tol": tol, "unit": unit})
            + "\n"
        )


def within(got: float, want: float, tol: float, what: str, detail: object = "") -> None:
    """Passes when |got - want| <= tol (same unit as both: percentage
    points, samples, ...); raises Miss otherwise."""
    _log(what, got - want, tol, "abs")
    if not abs(got - want) <= tol:
        raise Miss(f"{what}: got {got:.4g}, want {want:.4g} +/- {tol:g} {detail}")


def within_ratio(got: float, want: float, rel: float, what: str, detail: object = "") -> None:
    """Passes when |got - want| <= rel * want; the logged error is in
    percent of want."""
    error = 100.0 * (got - want) / want if want else float("inf")
    _log(what, error, 100.0 * rel, "%")
    if not abs(got - want) <= rel * want:
        raise Miss(f"{what}: got {got:.4g}, want {want:.4g} +/- {100 * rel:g}% {detail}")


def at_least(got: float, floor: float, what: str, detail: object = "") -> None:
    """Passes when got >= floor: a one-sided bound (a share that must
    dominate); the logged error is got - floor."""
    _log(what, got - floor, 0.0, "floor")
    if not got >= floor:
        raise Miss(f"{what}: got {got:.4g}, want at least {floor:.4g} {detail}")


def scales() -> List[float]:
    """Duration multipliers of the attempts: the first, then doubled."""
    first = 0.5 if SHORT else 1.0
    return [first * 2**i for i in range(RETRIES + 1)]


def measure(attempt: Callable[[float], None]) -> None:
    """Runs attempt(scale) until it passes, doubling scale after each miss,
    RETRIES times at most. Any other exception fails at once. When every
    attempt missed, fails with all their reasons."""
    misses = []
    for i, scale in enumerate(scales()):
        t0 = time.monotonic()
        try:
            attempt(scale)
        except Miss as e:
            took = time.monotonic() - t0
            misses.append(f"attempt {i + 1} (x{scale:g}, {took:.1f}s): {e}")
            RETRIED.append((_test_id(), i + 1, scale, took, str(e)))
            print(f"measurement missed, {misses[-1]}", file=sys.stderr)
            continue
        return
    raise AssertionError(f"missed at every length ({len(misses)} attempts):\n" + "\n".join(misses))
