"""cut(): a running CPU or wall profile handed out in parts, as the
continuous agent sends one per interval. Nothing may fall between two parts
or be counted in both, the parts' times must follow each other exactly, and
each part carries only the names its own samples use."""

from __future__ import annotations

import threading
import time

import pytest
from support.profiles import check_profile
from support.workloads import burn_python_for

import samprof
from samprof import _core
from samprof.pprof import read


def phase_one(seconds: float) -> float:
    return burn_python_for(seconds)


def phase_two(seconds: float) -> float:
    return burn_python_for(seconds)


def _parts(prof, work) -> list:
    """Runs each of work while prof runs, cutting after each; the last part
    is stop()'s. Returns [(profile, stats)]."""
    parts = []
    prof.start()
    for fn in work:
        fn()
        parts.append((prof.cut(), prof.stats))
    parts.append((prof.stop(), prof.stats))
    return [(check_profile(data, go=i == 0), stats) for i, (data, stats) in enumerate(parts)]


@pytest.mark.parametrize("cls", [samprof.CPUProfiler, samprof.WallProfiler])
def test_parts_follow_each_other_and_lose_nothing(cls) -> None:
    parts = _parts(cls(hz=1000), [lambda: phase_one(0.15), lambda: phase_two(0.15)] * 2)
    headers = [(v.msg.time_nanos, v.msg.duration_nanos) for v, _ in parts]
    for (t0, d0), (t1, _) in zip(headers, headers[1:]):
        assert t0 + d0 == t1
    if cls is samprof.CPUProfiler:
        # Every signal is a sample in exactly one part: the stats count
        # signals in the part where they came, the profile counts samples
        # in the part that drained them, so the totals must be equal.
        in_profiles = sum(sum(v[0] for _, _, v in view.samples()) for view, _ in parts)
        assert in_profiles == sum(stats.samples for _, stats in parts) > 0
    else:
        # This thread was sampled all along: the parts together hold its
        # whole wall time, to within a period or two of the wall clock.
        main = threading.get_native_id()
        held = sum(view.by_label("thread_id", "wall").get(main, 0) for view, _ in parts)
        duration = sum(d for _, d in headers)
        assert abs(held - duration) < 0.05 * duration, (held, duration)


def test_a_part_names_only_what_its_samples_use() -> None:
    prof = samprof.CPUProfiler(hz=1000)
    prof.start()
    phase_one(0.2)
    first = read(prof.cut())
    phase_two(0.2)
    second = read(prof.stop())
    names = [{f.name for f in p.functions} for p in (first, second)]
    assert "phase_one" in names[0] and "phase_two" not in names[0]
    assert "phase_two" in names[1] and "phase_one" not in names[1]
    for p in (first, second):
        used = {i for s in p.samples for i in s.location_ids}
        assert used == {loc.id for loc in p.locations}
        assert {loc.id for loc in p.locations} == set(range(1, len(p.locations) + 1))


def test_a_thread_that_ended_in_a_later_part_keeps_its_name() -> None:
    prof = samprof.WallProfiler(hz=200)
    prof.start()
    time.sleep(0.05)
    prof.cut()
    t = threading.Thread(target=time.sleep, args=(0.2,), name="short-lived")
    t.start()
    t.join()
    part = check_profile(prof.cut(), go=False)
    prof.stop()
    assert part.by_label("thread_name", "wall").get("short-lived", 0) > 0


def test_the_on_cpu_part_of_a_wall_profile() -> None:
    prof = samprof.WallProfiler(hz=500)
    prof.start()
    phase_one(0.2)
    time.sleep(0.2)
    wall, cpu, _, _ = prof._cut(cpu_part=True, thread_labels=False)
    prof.stop()
    w, c = check_profile(wall), check_profile(cpu)
    assert c.types == [("samples", "count"), ("cpu", "nanoseconds")]
    on_cpu = w.by_label("thread_state", "wall")["on-cpu"]
    assert sum(v[1] for _, _, v in c.samples()) == on_cpu
    assert 0.1e9 < on_cpu < 0.4e9
    labels = {key for p in (w, c) for _, labs, _ in p.samples() for key in labs}
    assert "thread_id" not in labels and "thread_name" not in labels


def test_cut_needs_a_running_profile() -> None:
    prof = samprof.CPUProfiler()
    with pytest.raises(samprof.ProfilerError, match="not running"):
        prof.cut()
    with prof:
        with pytest.raises(ValueError, match="only a wall profile"):
            _core.cut(True)


def test_a_thread_that_never_moves_has_its_time_in_every_part() -> None:
    """A blocked thread's CPU clock and stack do not move, so the wall
    sampler reuses what it read of it; every cut part must still hold the
    thread's whole time (to within two periods of 10 ms)."""
    release = threading.Event()
    ready = threading.Event()

    def blocked() -> None:
        ready.set()
        release.wait()

    t = threading.Thread(target=blocked, name="blocked")
    t.start()
    ready.wait()
    try:
        parts = _parts(samprof.WallProfiler(hz=100), [lambda: time.sleep(0.3)] * 3)
    finally:
        release.set()
        t.join()
    for view, _ in parts[:-1]:
        held = view.by_label("thread_id", "wall").get(t.native_id, 0)
        assert abs(held - view.msg.duration_nanos) <= 20_000_000, (held, view.msg.duration_nanos)
        names = {f[0] for frames, _, _ in view.samples() for f in frames}
        assert any(n.endswith("blocked") for n in names), names
