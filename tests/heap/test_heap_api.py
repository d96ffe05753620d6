"""HeapProfiler's API and the profile it writes: Go's heap profile, as go
tool pprof reads it, with samprof's labels and thread names."""

from __future__ import annotations

import gc
import gzip
import sys
import threading

import pytest
from support.profiles import check_profile, go_pprof

import samprof
from samprof import pprof

GO_TYPES = [
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
]


def make_blocks(n, size):
    return [bytearray(size) for _ in range(n)]


def under(view, fn):
    """The samples with fn among their frames (a list comprehension is a
    frame of its own before 3.12; names are qualified from 3.11)."""
    for frames, labels, values in view.samples():
        if any(name.rsplit(".", 1)[-1] == fn for name, _, _ in frames):
            yield labels, values


def total_under(view, fn, sample_type):
    i = view.value_index(sample_type)
    return sum(values[i] for _, values in under(view, fn))


def test_profile_is_gos_heap_profile():
    prof = samprof.HeapProfiler(rate=64 * 1024)
    prof.start()
    held = make_blocks(200, 32 * 1024)
    heap = prof.snapshot()
    allocs = prof.snapshot(kind="allocs")
    final = prof.stop()
    del held
    for data in (heap, allocs, final):
        view = check_profile(gzip.decompress(data))
        assert view.types == GO_TYPES
        assert (
            view.strings[view.msg.period_type.type],
            view.strings[view.msg.period_type.unit],
        ) == (
            "space",
            "bytes",
        )
        assert view.msg.period == 64 * 1024
        assert view.msg.time_nanos > 0 and view.msg.duration_nanos > 0
        assert any(c.startswith("samprof mode=heap rate=65536") for c in view.comments)
    # "heap" leaves in-use as the default (pprof shows the last type);
    # "allocs" names alloc_space, as Go's /debug/pprof/allocs does.
    assert check_profile(gzip.decompress(heap)).default_sample_type == ""
    assert check_profile(gzip.decompress(allocs)).default_sample_type == "alloc_space"
    view = check_profile(gzip.decompress(heap))
    blocks = list(under(view, "make_blocks"))
    assert blocks
    # Go's numeric label: the size of the sampled blocks (the arrays'
    # buffers; the list that holds them is made there too).
    assert any(labels["bytes"] == 32 * 1024 + 1 for labels, _ in blocks), blocks
    for labels, values in blocks:
        assert labels["bytes"] > 0
        assert labels["thread_name"] == "MainThread"
        # Unsampled: a sampled block stands for at least one block.
        assert values[0] >= 1 and values[1] >= labels["bytes"]
    assert prof.stats.sampled > 0
    assert prof.stats.hooks_left == 0 and not prof.stats.hooks_lost
    # go tool pprof picks the types by name.
    text = go_pprof(gzip.decompress(allocs), "-top", "-sample_index=alloc_space")
    assert "make_blocks" in text


def test_labels_and_threads_are_on_heap_samples():
    prof = samprof.HeapProfiler(rate=1)
    kept = []

    def worker():
        with samprof.labels(route="/upload"):
            kept.append(make_blocks(4, 4096))

    with prof:
        t = threading.Thread(target=worker, name="uploader")
        t.start()
        t.join()
    view = check_profile(gzip.decompress(prof.result))
    found = [labels for labels, _ in under(view, "make_blocks")]
    assert found
    assert all(lab.get("route") == "/upload" for lab in found), found
    assert all(lab.get("thread_name") == "uploader" for lab in found), found


def test_objects_freed_by_the_cyclic_gc_leave_inuse():
    class Node:
        def __init__(self):
            self.me = self
            self.payload = bytearray(4096)

    def make_cycles():
        return [Node() for _ in range(2000)]

    def payloads(view, sample_type):
        i = view.value_index(sample_type)
        return sum(v[i] for labels, v in under(view, "make_cycles") if labels["bytes"] == 4097)

    gc.disable()
    try:
        with samprof.HeapProfiler(rate=16 * 1024) as prof:
            cycles = make_cycles()
            during = prof.snapshot()
            del cycles
            assert gc.collect() >= 2000
    finally:
        gc.enable()
    # The payloads (4,097-byte buffers) were all freed by the collection.
    # (Other blocks made there may live on: on 3.9 and 3.10 the class's
    # shared instance-dict keys are made by the first instance, and one
    # such block, sampled, stands for ~16 KiB.)
    view = check_profile(gzip.decompress(during), go=False)
    assert payloads(view, "inuse_space") > 4 * 1024 * 1024
    final = check_profile(gzip.decompress(prof.result), go=False)
    assert payloads(final, "inuse_space") == 0
    assert payloads(final, "inuse_objects") == 0
    assert payloads(final, "alloc_space") > 4 * 1024 * 1024


def test_runs_beside_a_cpu_profile():
    cpu = samprof.CPUProfiler(hz=1000)
    heap = samprof.HeapProfiler(rate=32 * 1024)
    cpu.start()
    heap.start()
    total = 0
    for _ in range(200):
        total += len(make_blocks(50, 1024))
    heap_data = heap.stop()
    cpu_data = cpu.stop()
    hv = check_profile(gzip.decompress(heap_data))
    cv = check_profile(gzip.decompress(cpu_data))
    assert cv.types == [("samples", "count"), ("cpu", "nanoseconds")]
    assert hv.types == GO_TYPES
    assert total_under(hv, "make_blocks", "alloc_space") > 0
    assert cpu.stats.samples > 0


def test_errors():
    with pytest.raises(ValueError):
        samprof.HeapProfiler(rate=0)
    with pytest.raises(ValueError):
        samprof.HeapProfiler(max_depth=0)
    with pytest.raises(ValueError):
        samprof.HeapProfiler(max_live=-1)
    prof = samprof.HeapProfiler()
    with pytest.raises(samprof.ProfilerError):
        prof.stop()
    with pytest.raises(samprof.ProfilerError):
        prof.snapshot()
    prof.start()
    try:
        with pytest.raises(samprof.ProfilerError):
            prof.start()
        with pytest.raises(samprof.ProfilerError, match="already running"):
            samprof.HeapProfiler().start()
        with pytest.raises(ValueError):
            prof.snapshot(kind="cpu")
    finally:
        prof.stop()
    assert not prof.running
    # Stopped cleanly: a new profile can start.
    with samprof.HeapProfiler():
        pass


def test_read_by_samprof_pprof_and_top():
    with samprof.HeapProfiler(rate=8 * 1024) as prof:
        held = make_blocks(100, 16 * 1024)
    profile = pprof.read(prof.result)
    assert [t.type for t in profile.sample_types] == [t for t, _ in GO_TYPES]
    from samprof.report import top

    text = top(profile)
    assert "inuse_space" in text or "make_blocks" in text
    del held


def test_live_table_cap_counts_untracked():
    with samprof.HeapProfiler(rate=1, max_live=100) as prof:
        held = make_blocks(500, 64)
    assert prof.stats.untracked > 0
    view = check_profile(gzip.decompress(prof.result), go=False)
    assert any("untracked=" in c for c in view.comments)
    del held


def test_realloc_is_a_free_and_an_allocation():
    """A list grown by appends reallocates its item array again and again:
    every step is an allocation, and only the last array is in use (with
    the list object itself, unless it came from CPython's free list)."""

    def grow():
        lst = []
        for _ in range(10_000):
            lst.append(None)
        return lst

    # Run once unprofiled: a code object's first run may allocate for good
    # (since 3.12, once any sys.monitoring tool such as cProfile ran in the
    # process, each code object gets its monitoring data, 72 bytes, then).
    grow()
    with samprof.HeapProfiler(rate=1) as prof:
        kept = grow()
    view = check_profile(gzip.decompress(prof.result), go=False)
    items = sys.getsizeof(kept) - sys.getsizeof([])
    inuse = total_under(view, "grow", "inuse_space")
    assert inuse in (items, sys.getsizeof(kept)), (inuse, items)
    assert total_under(view, "grow", "inuse_objects") in (1, 2)
    # 10,000 appends take dozens of reallocations (the array grows by
    # about 1/8 each time).
    assert total_under(view, "grow", "alloc_objects") > 20
    del kept
