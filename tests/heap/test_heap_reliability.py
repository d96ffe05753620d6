"""The heap hooks with tracemalloc, fork, threads, deep stacks, and the CLI."""

from __future__ import annotations

import gzip
import tracemalloc
import warnings

import pytest
from support.processes import last_json, run_samprof, run_script
from support.profiles import check_profile, top_table

import samprof


def blocks(n, size):
    return [bytearray(size) for _ in range(n)]


@pytest.fixture
def no_tracemalloc():
    yield
    if tracemalloc.is_tracing():
        tracemalloc.stop()


def test_tracemalloc_started_before(no_tracemalloc):
    tracemalloc.start()
    with samprof.HeapProfiler(rate=4096) as prof:
        before = tracemalloc.get_traced_memory()[0]
        held = blocks(100, 10_000)
        # Both see the allocations: ours wraps tracemalloc's hooks.
        assert tracemalloc.get_traced_memory()[0] - before >= 1_000_000
    assert prof.stats.sampled > 0
    assert prof.stats.hooks_left == 0 and not prof.stats.hooks_lost
    # Our hooks are gone and tracemalloc's still work.
    before = tracemalloc.get_traced_memory()[0]
    more = blocks(100, 10_000)
    assert tracemalloc.get_traced_memory()[0] - before >= 1_000_000
    del held, more


def test_tracemalloc_started_after_keeps_our_hooks_in_its_chain(no_tracemalloc):
    prof = samprof.HeapProfiler(rate=4096)
    prof.start()
    tracemalloc.start()
    held = blocks(100, 10_000)
    with pytest.warns(RuntimeWarning, match="stayed installed"):
        prof.stop()
    # Removing ours would have unhooked tracemalloc: they stay, passing
    # calls through, and tracemalloc goes on tracing.
    assert prof.stats.hooks_left == 2
    before = tracemalloc.get_traced_memory()[0]
    more = blocks(100, 10_000)
    assert tracemalloc.get_traced_memory()[0] - before >= 1_000_000
    tracemalloc.stop()
    # tracemalloc put ours back; the next profile uses them and, being on
    # top, removes them.
    with samprof.HeapProfiler(rate=4096) as again:
        evenmore = blocks(100, 10_000)
    assert again.stats.sampled > 0 and again.stats.hooks_left == 0
    del held, more, evenmore


def test_tracemalloc_stopped_under_us_is_reported(no_tracemalloc):
    tracemalloc.start()
    prof = samprof.HeapProfiler(rate=4096)
    prof.start()
    # tracemalloc.stop() restores the allocators it found at its start,
    # which drops ours.
    tracemalloc.stop()
    prof.snapshot()
    assert prof.stats.hooks_lost
    with pytest.warns(RuntimeWarning, match="removed by someone else"):
        prof.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with samprof.HeapProfiler(rate=4096) as again:
            held = blocks(10, 1000)
    assert again.stats.hooks_left == 0 and not again.stats.hooks_lost
    del held


def test_churn_threads_fork_tracemalloc_and_deep_stacks():
    """1,000 start/stop cycles (half with numpy=True) while four threads
    allocate; tracemalloc toggled around them; a fork with the profile
    running; a deep recursion. Run under ASan+UBSan by make
    test-sanitize."""
    r = last_json(run_script("heap_churn.py", "1000", "20000", timeout=600).stdout)
    assert r["fork"] == 0, r
    assert r["sampled"] > 0
    assert r["worker_batches"] >= 100, r  # the threads did allocate meanwhile
    assert r["left"] > 0  # tracemalloc started above ours in some cycles
    assert r["numpy"] == 500 and r["no_gil"] == 0, r
    assert r["truncated"] > 0 and r["kept"] == 100, r


def test_cli_record_heap_and_top(tmp_path):
    script = tmp_path / "alloc.py"
    script.write_text(
        "def hold():\n"
        "    kept = [None] * 300\n"
        "    for i in range(300):\n"
        "        kept[i] = bytearray(100_000)\n"
        "    return kept\n"
        "def churn():\n"
        "    for _ in range(2000):\n"
        "        bytearray(100_000)\n"
        "kept = hold()\n"
        "churn()\n"
    )
    out = tmp_path / "heap.pb.gz"
    r = run_samprof(
        ["record", "--mode", "heap", "--rate", "65536", "-o", str(out), str(script)], tmp_path
    )
    assert r.returncode == 0, r.stderr.decode()
    assert b"sampled allocations at rate 65536" in r.stderr
    view = check_profile(gzip.decompress(out.read_bytes()))
    assert view.msg.period == 65536
    inuse = view.by_function("inuse_space")
    assert inuse.get("hold", 0) > 10_000_000
    assert inuse.get("churn", 0) < 1_000_000
    # top shows in-use space by default, and alloc_space with -i.
    r = run_samprof(["top", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    names = [row[-1] for row in top_table(r.stdout.decode())]
    assert names[0] == "hold", r.stdout.decode()
    r = run_samprof(["top", "-i", "alloc_space", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    names = [row[-1] for row in top_table(r.stdout.decode())]
    assert names[0] == "churn", r.stdout.decode()
    # Options of the other modes are refused.
    r = run_samprof(["record", "--mode", "heap", "--hz", "100", str(script)], tmp_path)
    assert r.returncode == 2 and b"--hz" in r.stderr
    r = run_samprof(["record", "--rate", "100", str(script)], tmp_path)
    assert r.returncode == 2 and b"--rate" in r.stderr
