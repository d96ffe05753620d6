"""The CPUProfiler API: lifecycle, errors, and what stop() restores."""

from __future__ import annotations

import gc
import gzip
import signal
import threading
import time

import pytest
from support import SANITIZED, measure
from support.procfs import rss_kib
from support.profiles import check_profile, go_pprof
from support.workloads import burn_python_for

import samprof
from samprof import _core


def test_profile_seconds_returns_gzipped_pprof():
    data = samprof.CPUProfiler(hz=200).profile(0.2)
    assert data[:2] == b"\x1f\x8b"
    view = check_profile(data)
    assert view.msg.duration_nanos >= 0.19e9
    assert view.msg.time_nanos > 0


def test_context_manager_and_stats():
    with samprof.CPUProfiler(hz=500) as prof:
        burn_python_for(0.2)
    assert prof.result is not None and prof.stats is not None
    assert prof.stats.engine in ("perf", "timer", "itimer")
    assert prof.stats.samples > 0
    assert any("engine=" + prof.stats.engine in c for c in check_profile(prof.result).comments)


@pytest.mark.parametrize(
    "profiler, kind", [(samprof.CPUProfiler, "cpu"), (samprof.WallProfiler, "wall")]
)
def test_profiles_name_their_default_sample_type(profiler, kind):
    """Every profile says which sample type pprof shows first (Go's CPU
    profile leaves it to pprof's default, the last type: the same one)."""
    with profiler(hz=500) as prof:
        burn_python_for(0.1)
    view = check_profile(prof.result)
    assert view.types == [("samples", "count"), (kind, "nanoseconds")]
    assert view.default_sample_type == kind
    period_type = view.msg.period_type
    assert (view.strings[period_type.type], view.strings[period_type.unit]) == (kind, "nanoseconds")
    assert f"{kind}/nanoseconds[dflt]" in go_pprof(prof.result, "-raw")


@pytest.mark.parametrize("profiler", [samprof.CPUProfiler, samprof.WallProfiler])
def test_comments_say_what_the_stats_say(profiler):
    """The profile's comments and prof.stats come from the same numbers."""
    import ast

    with profiler(hz=500) as prof:
        burn_python_for(0.1)
    stats = prof.stats
    mode, dropped, threads = check_profile(prof.result).comments
    assert mode == (
        f"samprof mode={stats.mode} engine={stats.engine} "
        f"requested_hz={stats.requested_hz} effective_hz={stats.effective_hz:.1f}"
    )
    head, _, truncated = dropped.rpartition(" truncated=")
    assert ast.literal_eval(head.removeprefix("samprof dropped: ")) == stats.dropped
    assert int(truncated) == stats.truncated
    assert stats.dropped["out_of_memory"] == 0, stats.dropped
    assert ast.literal_eval(threads.removeprefix("samprof threads: ")) == stats.threads_by_engine


def test_one_profiler_at_a_time():
    a = samprof.CPUProfiler()
    b = samprof.CPUProfiler()
    a.start()
    try:
        with pytest.raises(samprof.ProfilerError, match="already running"):
            b.start()
        with pytest.raises(samprof.ProfilerError, match="already running"):
            a.start()
    finally:
        a.stop()
    with pytest.raises(samprof.ProfilerError, match="not running"):
        a.stop()


@pytest.mark.parametrize("hz", [0, -5, 10**9, 1.5, float("nan"), "100", None])
def test_bad_hz(hz):
    with pytest.raises((ValueError, TypeError)):
        samprof.CPUProfiler(hz=hz)


def test_bad_seconds_and_engine():
    with pytest.raises(ValueError):
        samprof.CPUProfiler().profile(-1)
    with pytest.raises(ValueError):
        samprof.CPUProfiler(engine="bogus")
    with pytest.raises(ValueError):
        samprof.CPUProfiler(signal=signal.SIGSEGV).start()


def test_signal_owned_by_someone_else_is_refused():
    old = signal.signal(signal.SIGPROF, lambda *a: None)
    try:
        with pytest.raises(samprof.ProfilerError, match="SIGRTMIN"):
            samprof.CPUProfiler().start()
    finally:
        signal.signal(signal.SIGPROF, old)
    assert not _core.is_running()


def test_other_signal_can_be_chosen():
    sig = signal.SIGRTMIN + 3
    with samprof.CPUProfiler(hz=1000, signal=sig) as prof:
        burn_python_for(0.2)
    assert prof.stats.samples > 50
    assert signal.getsignal(sig) == signal.SIG_DFL


def test_stop_restores_signal_and_timer():
    before = signal.getsignal(signal.SIGPROF)
    with samprof.CPUProfiler(hz=1000):
        burn_python_for(0.05)
    assert signal.getsignal(signal.SIGPROF) == before
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
    # No late SIGPROF kills the process after stop.
    burn_python_for(0.1)


def test_start_stop_many_times_with_thread_churn():
    """Each start/stop cycle while threads come and go leaves no memory
    behind. A leak grows with the cycles; a one-off step of the allocator
    (a new arena for a new thread, which depends on what ran before in
    this process) does not come back when the cycles run again, twice as
    many, so a miss is measured again (support/measure.py)."""
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            t = threading.Thread(target=burn_python_for, args=(0.001,))
            t.start()
            t.join()

    churner = threading.Thread(target=churn, name="churner")
    churner.start()
    prof = samprof.CPUProfiler(hz=2000)

    def attempt(scale):
        rounds = 200 if SANITIZED else int(1000 * scale)
        rss = []
        for i in range(rounds):
            if i >= 100 and i % 100 == 0:
                gc.collect()
                rss.append(rss_kib())
            prof.start()
            burn_python_for(0.0005)
            prof.stop()
        gc.collect()
        rss.append(rss_kib())
        check_profile(prof.result, go=False)
        if SANITIZED:
            return  # ASan's quarantine holds freed memory: RSS says nothing here
        grown = rss[-1] - rss[0]
        spare = 8 * 1024 - grown
        measure.at_least(spare, 0, "KiB left of the 8 MiB VmRSS may grow", f"VmRSS: {rss}")

    try:
        measure.measure(attempt)
    finally:
        stop.set()
        churner.join()


def test_encoding_100k_distinct_stacks_is_fast():
    # CPU time, not wall time: the machine may be busy with other work.
    raw, encode_seconds = _core._encode_synthetic(100_000, 20)
    t0 = time.thread_time()
    data = gzip.compress(raw, compresslevel=6)
    elapsed = encode_seconds + time.thread_time() - t0
    view = check_profile(data, go=False)
    assert len(view.msg.sample) == 100_000
    limit = 5.0 if SANITIZED else 1.0
    assert elapsed < limit, elapsed
