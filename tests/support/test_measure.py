"""The retry helper of the statistical tests (tests/support/measure.py)
retries the measurement, never the verdict: a profiler that is really off
still fails."""

from __future__ import annotations

import time

import pytest

import samprof
from support import SANITIZED, measure
from support.profiles import check_profile
from support.workloads import burn_python_for


@pytest.mark.skipif(SANITIZED, reason="timing accuracy is not meaningful under ASan")
def test_a_wrong_expectation_fails_after_every_retry():
    # A real measurement checked against a deliberately wrong truth: the
    # CPU the process used, times 1.5 (a profiler that lost a third).
    scales = []

    def attempt(scale):
        scales.append(scale)
        prof = samprof.CPUProfiler(hz=1000)
        c0 = time.process_time()
        prof.start()
        burn_python_for(0.1 * scale)
        data = prof.stop()
        used = time.process_time() - c0
        got = check_profile(data, go=False).total("cpu") / 1e9
        measure.within_ratio(got, 1.5 * used, 0.05, "CPU accounted, s")

    before = len(measure.RETRIED)
    with pytest.raises(AssertionError, match="missed at every length") as e:
        measure.measure(attempt)
    # Retries of this test are expected: keep them out of the run's report.
    assert len(measure.RETRIED) == before + len(scales)
    del measure.RETRIED[before:]
    assert scales == measure.scales(), scales
    assert len(scales) == measure.RETRIES + 1
    # Each attempt ran twice as long as the one before.
    assert all(b == 2 * a for a, b in zip(scales, scales[1:])), scales
    assert str(e.value).count("CPU accounted") == len(scales)


def test_a_miss_is_measured_again_and_recorded():
    calls = []

    def attempt(scale):
        calls.append(scale)
        if len(calls) == 1:
            measure.within(10.0, 0.0, 3, "deliberate first miss, pp")
        measure.within(1.0, 0.0, 3, "second attempt, pp")

    before = len(measure.RETRIED)
    measure.measure(attempt)
    assert calls == measure.scales()[:2]
    assert len(measure.RETRIED) == before + 1
    # The summary would show it: take it back out of this run's report.
    del measure.RETRIED[before:]


def test_other_failures_are_not_retried():
    calls = []

    def attempt(scale):
        calls.append(scale)
        raise AssertionError("a broken profile, not a noisy one")

    with pytest.raises(AssertionError, match="broken profile"):
        measure.measure(attempt)
    assert len(calls) == 1
