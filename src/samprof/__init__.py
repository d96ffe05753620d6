"""samprof: Go's profiling experience for Python.

A sampling profiler with its core in C. Pull a CPU, wall-clock or heap
profile out of a live process and read it with ``go tool pprof`` or
``samprof top``::

    import samprof

    data = samprof.CPUProfiler(hz=100).profile(seconds=10)
    with open("cpu.pb.gz", "wb") as f:
        f.write(data)

    with samprof.CPUProfiler(hz=1000) as prof:
        work()
    open("cpu.pb.gz", "wb").write(prof.result)

    with samprof.HeapProfiler() as prof:  # one sample per 512 KiB allocated
        work()
    open("heap.pb.gz", "wb").write(prof.result)

Over HTTP, ``samprof.serve()`` (or ``samprof serve -- app.py``) serves
Go's /debug/pprof endpoints from the process; ``samprof.wsgi`` and
``samprof.asgi`` hold the endpoints as mountable applications and
``ProfilerMiddleware``, which profiles a web application's requests
(``samprof.profiled`` does the same for code outside requests).

Profiles are read, written, merged and compared by :mod:`samprof.pprof`,
which is pure Python. The profilers need the compiled core; their names are
loaded on first use, so ``import samprof`` and ``import samprof.pprof`` work
where the core is not built, and using a profiler there raises an
ImportError that says how to build it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:
    from samprof._heap import HeapProfiler, HeapStats
    from samprof._labels import current_labels, labels
    from samprof._middleware import Backend, RequestInfo, SamplingBackend, profiled, set_route
    from samprof._profiler import CPUProfiler, ProfilerError, ProfileStats, WallProfiler
    from samprof.http import serve

__all__ = [
    "Backend",
    "CPUProfiler",
    "HeapProfiler",
    "HeapStats",
    "ProfileStats",
    "ProfilerError",
    "RequestInfo",
    "SamplingBackend",
    "WallProfiler",
    "current_labels",
    "labels",
    "profiled",
    "serve",
    "set_route",
    "__version__",
]
__version__ = "0.1.0"

# Public name -> the module that defines it. Each of these modules needs the
# compiled core (through samprof._core), so none is imported until asked for.
_LAZY = {
    "Backend": "samprof._middleware",
    "CPUProfiler": "samprof._profiler",
    "HeapProfiler": "samprof._heap",
    "HeapStats": "samprof._heap",
    "ProfileStats": "samprof._profiler",
    "ProfilerError": "samprof._profiler",
    "WallProfiler": "samprof._profiler",
    "current_labels": "samprof._labels",
    "labels": "samprof._labels",
    "profiled": "samprof._middleware",
    "RequestInfo": "samprof._middleware",
    "SamplingBackend": "samprof._middleware",
    "serve": "samprof.http",
    "set_route": "samprof._middleware",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'samprof' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
