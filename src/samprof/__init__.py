"""samprof: Go's profiling experience for Python.

A sampling profiler with its core in C. Pull a CPU profile out of a live
process and read it with ``go tool pprof`` or ``samprof top``::

    import samprof

    data = samprof.CPUProfiler(hz=100).profile(seconds=10)
    with open("cpu.pb.gz", "wb") as f:
        f.write(data)

    with samprof.CPUProfiler(hz=1000) as prof:
        work()
    open("cpu.pb.gz", "wb").write(prof.result)
"""

from samprof._labels import current_labels, labels
from samprof._profiler import CPUProfiler, ProfilerError, ProfileStats, WallProfiler

__all__ = [
    "CPUProfiler",
    "ProfileStats",
    "ProfilerError",
    "WallProfiler",
    "current_labels",
    "labels",
    "__version__",
]
__version__ = "0.1.0"
