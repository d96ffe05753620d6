"""CPU profiles account for the CPU the process used, per engine and rate,
and split it among functions and threads as measured by time.thread_time."""

from __future__ import annotations

import threading
import time

import pytest
from support import SANITIZED
from support.measure import measure, within, within_ratio
from support.profiles import check_profile
from support.workloads import burn_python_for, hash_for, hold_gil_for, spin_python

import samprof

pytestmark = [
    pytest.mark.skipif(SANITIZED, reason="timing accuracy is not meaningful under ASan"),
    pytest.mark.accuracy,
]


def _mixed_workload(seconds: float) -> None:
    t = threading.Thread(target=hash_for, args=(seconds,), name="hasher")
    t.start()
    burn_python_for(seconds)
    t.join()


@pytest.mark.parametrize("engine", ["perf", "timer", "itimer"])
@pytest.mark.parametrize("hz", [100, 1000, 10000])
def test_total_cpu_matches_process_time(engine, hz):
    """Tolerance 5% of the CPU used. Spread measured by `make spread` (20
    first attempts on Python 3.13, 2-core VM): |error| min/median/max
    0.1%/0.57%/1.6%, at most 32% of the tolerance (180 comparisons).
    """

    def attempt(scale):
        # At 100 Hz a sample is 10 ms: run long enough that one period of
        # rounding per thread is small against the tolerance.
        seconds = (1.5 if hz == 100 else 0.6) * scale
        prof = samprof.CPUProfiler(hz=hz, engine=engine)
        c0 = time.process_time()
        prof.start()
        _mixed_workload(seconds)
        data = prof.stop()
        used = time.process_time() - c0
        view = check_profile(data)
        assert prof.stats.engine == engine
        assert view.types == [("samples", "count"), ("cpu", "nanoseconds")]
        assert view.msg.period == 1_000_000_000 // hz
        within_ratio(view.total("cpu") / 1e9, used, 0.05, "CPU accounted, s", prof.stats)

    measure(attempt)


def test_a_long_c_call_keeps_its_samples():
    """One C call holding the GIL for six times the sample ring's span (256
    slots: 0.26 s at 1 kHz) loses nothing: the collector's round thread
    moves samples into the backlog without waiting for the GIL, and the
    call's CPU lands in its caller. Before the backlog 95% of a 5 s call
    was dropped as buffer full. Tolerance 5% of the CPU the call used.
    """

    def attempt(scale):
        prof = samprof.CPUProfiler(hz=1000)
        prof.start()
        used = hold_gil_for(1.5 * scale)
        data = prof.stop()
        st = prof.stats
        lost = st.dropped["buffer_full"]
        assert lost <= 0.001 * (st.samples + lost), st
        assert st.backlog["samples"] > 0, st
        view = check_profile(data)
        got = view.by_function("cpu").get("hold_gil_for", 0) / 1e9
        within_ratio(got, used, 0.05, "CPU in the call's caller, s", st)

    measure(attempt)


def test_perf_engine_honours_10khz():
    """10,000 samples per CPU-second, not the 250 Hz kernel tick. Spread
    measured by `make spread` (20 first attempts on Python 3.13, 2-core VM):
    |error| min/median/max 3.2e+02/3.7e+02/5.4e+02, at most 72% of the
    tolerance (20 comparisons).
    """

    def attempt(scale):
        prof = samprof.CPUProfiler(hz=10000, engine="perf")
        prof.start()
        burn_python_for(0.5 * scale)
        prof.stop()
        within(prof.stats.effective_hz, 9750, 750, "effective Hz", prof.stats)

    measure(attempt)


def test_timer_engine_is_tick_bound_but_weighted():
    """Tolerance 5% of the CPU used. Spread measured by `make spread` (20
    first attempts on Python 3.13, 2-core VM): |error| min/median/max
    0.53%/0.98%/1.3%, at most 27% of the tolerance (20 comparisons).
    """

    def attempt(scale):
        prof = samprof.CPUProfiler(hz=1000, engine="timer")
        c0 = time.process_time()
        prof.start()
        burn_python_for(0.8 * scale)
        data = prof.stop()
        used = time.process_time() - c0
        view = check_profile(data, go=False)
        assert prof.stats.effective_hz <= 1050
        within_ratio(view.total("cpu") / 1e9, used, 0.05, "CPU accounted, s")

    measure(attempt)


def f_small(n):
    return spin_python(n)


def f_medium(n):
    return spin_python(n)


def f_large(n):
    return spin_python(n)


def test_function_shares_match_thread_time():
    """Tolerance 3 pp per function. Spread measured by `make spread` (20 first
    attempts on Python 3.13, 2-core VM): |error| min/median/max
    0.0043/0.2/0.64, at most 21% of the tolerance (60 comparisons).
    """

    def attempt(scale):
        measured = {"f_small": 0.0, "f_medium": 0.0, "f_large": 0.0}
        plan = [(f_small, 1), (f_medium, 2), (f_large, 4)]
        prof = samprof.CPUProfiler(hz=1000)
        prof.start()
        deadline = time.thread_time() + 3.5 * scale
        while time.thread_time() < deadline:
            for fn, reps in plan:
                t0 = time.thread_time()
                for _ in range(reps):
                    fn(3000)
                measured[fn.__name__] += time.thread_time() - t0
        data = prof.stop()
        view = check_profile(data)
        counts = view.by_function("samples")
        total_samples = sum(counts.get(name, 0) for name in measured)
        assert total_samples >= 3000 * scale, counts
        total_measured = sum(measured.values())
        for name, secs in measured.items():
            want = 100 * secs / total_measured
            got = 100 * counts.get(name, 0) / total_samples
            within(got, want, 3, f"{name} share, pp", (counts, measured))

    measure(attempt)


def test_thread_shares_match_thread_time():
    """Tolerance 3 pp per thread. Spread measured by `make spread` (20 first
    attempts on Python 3.13, 2-core VM): |error| min/median/max
    0.0002/0.091/0.47, at most 16% of the tolerance (60 comparisons).
    """

    def attempt(scale):
        cpu = {}

        def hasher(name, seconds):
            cpu[name] = hash_for(seconds)

        prof = samprof.CPUProfiler(hz=1000)
        prof.start()
        a = threading.Thread(target=hasher, args=("hash-a", 1.5 * scale), name="hash-a")
        b = threading.Thread(target=hasher, args=("hash-b", 0.75 * scale), name="hash-b")
        a.start()
        b.start()
        cpu["MainThread"] = burn_python_for(1.0 * scale)
        a.join()
        b.join()
        data = prof.stop()
        view = check_profile(data)
        # Every sample names its thread and its native id.
        for _, labels, _ in view.samples():
            assert isinstance(labels.get("thread_name"), str) and labels["thread_name"]
            assert isinstance(labels.get("thread_id"), int)
        by_thread = view.by_label("thread_name", "samples")
        total = sum(by_thread.get(n, 0) for n in cpu)
        measured_total = sum(cpu.values())
        for name, secs in cpu.items():
            want = 100 * secs / measured_total
            got = 100 * by_thread.get(name, 0) / total
            within(got, want, 3, f"{name} share, pp", (by_thread, cpu))

    measure(attempt)
