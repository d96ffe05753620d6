"""One measurement: runs a workload, optionally under an in-process
profiler, and writes what it measured from the inside as JSON.

Usage (by the harness): ``python -m benchmarks.child SPEC.json RESULT.json``.
SPEC holds ``workload``, ``scale``, ``profiler`` (a profilers.SPECS id),
``duration_hint_s`` and, for the memory soak, ``seconds``.

Wall time (perf_counter) and CPU time (process_time: every thread of the
process, the profiler's own threads included) are taken around the workload
only; peak RSS (VmHWM) is read right after the profiler has stopped and produced its
result, before anything reads that result back.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import resource
import sys
import time
from typing import Any, Dict


def _peak_rss_kib() -> int:
    """VmHWM: the peak RSS of this process image. Unlike ru_maxrss it starts
    afresh at exec, so it does not inherit the peak of whichever process
    forked this one (the harness, or py-spy)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _current_rss_kib() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() // 1024


def measure(spec: Dict[str, Any]) -> Dict[str, Any]:
    from benchmarks import profilers, workloads

    profiler = profilers.BY_ID[spec["profiler"]]
    workload = workloads.make(spec["workload"], spec["scale"], spec.get("seconds"))
    adapter = profilers.make_adapter(profiler, spec.get("duration_hint_s", 2.0))

    workload.prepare()
    gc.collect()
    rss_before = _current_rss_kib()

    t0 = time.perf_counter()
    adapter.start()
    t1 = time.perf_counter()
    c1 = time.process_time()
    truth = workload.run()
    c2 = time.process_time()
    t2 = time.perf_counter()
    rss_end = _current_rss_kib()
    result = adapter.stop()
    t3 = time.perf_counter()
    peak_rss = _peak_rss_kib()
    workload.close()

    out: Dict[str, Any] = {
        "python": sys.version.split()[0],
        "wall_s": t2 - t1,
        "cpu_s": c2 - c1,
        "start_s": t1 - t0,
        "stop_s": t3 - t2,
        "peak_rss_kib": peak_rss,
        "rss_before_kib": rss_before,
        "rss_end_kib": rss_end,
        "truth": truth,
        "profile_bytes": adapter.size(result),
        "details": adapter.details(),
    }
    try:
        out["profile"] = adapter.group_values(result, workload.groups)
    except Exception as e:  # reported, not fatal: overhead is still valid
        out["profile"] = None
        out["profile_error"] = f"{type(e).__name__}: {e}"
    # Last, so that it covers everything the process did (the harness
    # subtracts it from the profiler process's CPU for out-of-process tools).
    out["cpu_total_s"] = time.process_time()
    return out


def main(argv: list) -> int:
    if len(argv) != 3:
        print("usage: python -m benchmarks.child SPEC.json RESULT.json", file=sys.stderr)
        return 2
    # A profiler that crashes the process leaves a Python traceback in
    # stderr, which the harness reports.
    faulthandler.enable()
    with open(argv[1]) as f:
        spec = json.load(f)
    out = measure(spec)
    with open(argv[2], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
