"""HeapProfiler(numpy=True): numpy's array data, which comes from numpy's
own allocation handler and not from Python's MEM and OBJ domains, is
counted as Python's allocations are (tests/scripts/heap_numpy.py).

numpy is a test dependency (pyproject.toml), so these run on every
supported Python with the newest numpy that Python has wheels for.
Tolerances are the accuracy tests' (tests/heap/test_heap_accuracy.py):
10% of the truth for space, which at the default rate is 2.5 to 4 times
the expected spread; each comparison is retried at double the size before
it fails.
"""

from __future__ import annotations

import gzip
import statistics
import subprocess
import sys
import threading

import numpy as np
import pytest
from support.measure import measure, within_ratio
from support.processes import last_json, run_samprof, run_script
from support.profiles import View, check_profile

import samprof

RATE = 512 * 1024

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import get_handler_name


def _flat(view: View, sample_type: str):
    """Function -> value of sample_type, cumulative: numpy's own Python
    functions (np.ones is one) make some of the arrays."""
    return view.by_function(sample_type, cumulative=True)


def _run(tmp_path, scale, rate=RATE, numpy=True):
    out = tmp_path / f"x{scale:g}-{rate}-{int(numpy)}"
    out.mkdir()
    r = run_script("heap_numpy.py", str(scale), str(out), str(rate), str(int(numpy)), timeout=120)
    truth = last_json(r.stdout)
    final = check_profile((out / "final.pb.gz").read_bytes())
    snapshots = [View((out / f"keep-{i}.pb.gz").read_bytes()) for i in range(truth["rounds"])]
    return truth, final, snapshots


@pytest.mark.accuracy
def test_array_data_is_counted_per_function(tmp_path):
    """alloc_space of each function, in-use space of the arrays kept
    (mean over the snapshots), alloc_objects of churn_arrays's data: 10%,
    10%, 15% of the truth, as for Python's own allocations. thread_arrays runs
    in a thread started after the profile."""

    def attempt(scale):
        truth, final, snapshots = _run(tmp_path, scale)
        assert truth["numpy"] and truth["untracked"] == 0 and truth["no_gil"] == 0, truth
        assert truth["handler_after"] == "default_allocator"
        space = _flat(final, "alloc_space")
        for fn in ("churn_arrays", "keep_arrays", "thread_arrays", "grow"):
            within_ratio(space.get(fn, 0), truth[fn]["space"], 0.10, f"{fn} alloc_space")
        # Each array is two blocks, its object (about 100 bytes, sampled
        # rarely: a loose estimate) and its data; the data blocks' count
        # is checked.
        objects = sum(
            values[0]
            for frames, labels, values in final.samples()
            if labels["bytes"] >= 8192 and any(f[0] == "churn_arrays" for f in frames)
        )
        within_ratio(objects, truth["churn_arrays"]["objects"], 0.15, "churn_arrays data blocks")
        held = [_flat(s, "inuse_space").get("keep_arrays", 0) for s in snapshots]
        within_ratio(
            statistics.mean(held),
            truth["keep_arrays"]["inuse"],
            0.10,
            "keep_arrays in-use (mean)",
            held,
        )
        # Released before the end: nothing of keep_arrays is in use.
        assert _flat(final, "inuse_space").get("keep_arrays", 0) == 0

    measure(attempt)


def test_without_numpy_true_array_data_is_not_seen(tmp_path):
    """The default: only the array objects and numpy's bookkeeping in
    Python's allocators are seen (96 bytes per array with numpy 2.4, 734
    with numpy 1.22, measured at rate 1), not the 8 and 64 KiB of data:
    under a quarter of the truth."""
    truth, final, _ = _run(tmp_path, 0.25, numpy=False)
    assert not truth["numpy"]
    space = _flat(final, "alloc_space")
    for fn in ("churn_arrays", "keep_arrays"):
        assert space.get(fn, 0) < 0.25 * truth[fn]["space"], (fn, space)


def test_every_array_at_rate_one_with_realloc(tmp_path):
    """rate=1 records every block: grow's array data, reallocated 127
    times, holds exactly its final size in use, and allocated exactly the
    sum of its sizes (each realloc a free and an allocation). Blocks under
    8 KiB are numpy's small bookkeeping, not the data."""
    truth, final, _ = _run(tmp_path, 0.01, rate=1)
    space = inuse = 0
    for frames, labels, values in final.samples():
        if frames[0][0] == "grow" and labels["bytes"] >= 8192:
            space += values[1]
            inuse += values[3]
    assert space == truth["grow"]["space"]
    assert inuse == truth["grow"]["inuse"]
    flat = _flat(final, "inuse_space")
    assert flat.get("churn_arrays", 0) < 1024
    assert flat.get("thread_arrays", 0) < 1024


def test_handler_is_put_back_and_stats_say_numpy():
    before = get_handler_name()
    prof = samprof.HeapProfiler(numpy=True)
    prof.start()
    try:
        assert get_handler_name() == "samprof"
        seen = []
        t = threading.Thread(target=lambda: seen.append(get_handler_name()))
        t.start()
        t.join()
        assert seen == ["samprof"]
        arrays = [np.ones(65536) for _ in range(64)]  # 32 MiB
    finally:
        prof.stop()
    assert get_handler_name() == before
    assert prof.stats.numpy
    # Arrays made under samprof's handler free through it after the stop.
    del arrays
    # A profile without numpy=True leaves numpy's handler alone.
    with samprof.HeapProfiler() as p:
        assert get_handler_name() == before
    assert not p.stats.numpy
    view = check_profile(gzip.decompress(prof.result))
    assert view.by_function("alloc_space", cumulative=True).get(
        "test_handler_is_put_back_and_stats_say_numpy", 0
    ) > 16 * (1 << 20)


def test_restarts_reuse_one_handler():
    """Start and stop many times: one wrapper per handler found, and the
    default comes back each time."""
    for _ in range(200):
        prof = samprof.HeapProfiler(rate=4096, numpy=True)
        prof.start()
        a = np.arange(10000)
        prof.stop()
        del a
        assert get_handler_name() == "default_allocator"


def test_numpy_true_without_numpy_is_a_clear_error():
    """numpy not importable: numpy=True says so at start(); the default
    profile works as ever."""
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "import samprof\n"
        "try:\n"
        "    samprof.HeapProfiler(numpy=True).start()\n"
        "except samprof.ProfilerError as e:\n"
        "    print('error:', e)\n"
        "with samprof.HeapProfiler() as p:\n"
        "    x = [bytes(1000) for _ in range(1000)]\n"
        "print('ok', p.stats.numpy, len(p.result) > 0)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "error: numpy=True, but numpy cannot be imported" in r.stdout, r.stdout
    assert "ok False True" in r.stdout, r.stdout


def test_numpy_must_be_a_bool():
    with pytest.raises(TypeError):
        samprof.HeapProfiler(numpy=1)


def test_cli_record_heap_numpy(tmp_path):
    """samprof record --mode heap --numpy: the arrays a script holds at
    exit are in the profile; --numpy is refused with --mode cpu."""
    script = tmp_path / "arrays.py"
    script.write_text(
        "import numpy as np\n"
        "def hold():\n"
        "    return [np.ones(1 << 18) for _ in range(32)]\n"  # 2 MiB each: 2% spread
        "kept = hold()\n"
    )
    out = tmp_path / "heap.pb.gz"
    r = run_samprof(["record", "--mode", "heap", "--numpy", "-o", str(out), str(script)], tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert b"numpy's array data included" in r.stderr
    view = check_profile(gzip.decompress(out.read_bytes()))
    within_ratio(_flat(view, "inuse_space").get("hold", 0), 64 << 20, 0.10, "hold in-use")
    r = run_samprof(["record", "--numpy", str(script)], tmp_path)
    assert r.returncode == 2 and b"--numpy" in r.stderr
