"""The heap profiler: Go's sampled heap profile of Python's allocators."""

from __future__ import annotations

import gzip
import importlib
import os
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from samprof import _core
from samprof._profiler import (
    ProfilerError,
    _arm_new_threads,
    _hidden_files,
    _Lifecycle,
    _Slot,
)

_KINDS = ("heap", "allocs")
# One heap profile runs at a time in a process. At exit it is stopped, so
# that no hook samples while the interpreter tears itself down.
_slot = _Slot()
_hidden_files.add(os.path.abspath(__file__))


@dataclass(frozen=True)
class HeapStats:
    """What a heap profile holds and what it could not see.

    ``sampled`` counts the allocations sampled (one per ``rate`` bytes on
    average), ``live`` the sampled blocks not freed yet. ``untracked``
    counts sampled blocks the live table had no room for: their
    allocation is in the profile, but not in the in-use values (their free
    could not be seen). ``hooks_lost`` is true once a snapshot found that
    someone removed samprof's allocator hooks (``tracemalloc.stop()`` after
    a ``tracemalloc.start()`` made before samprof's start does): frees are
    missed from then on. ``hooks_left`` (after stop) counts hooks that
    stayed in another allocator's chain, passing calls through. ``numpy``
    is true while numpy's array data is counted too.
    """

    rate: int
    sampled: int
    live: int
    untracked: int
    dropped: Dict[str, int]
    truncated: int
    hooks_lost: bool
    hooks_left: int
    numpy: bool
    profile_bytes: int
    duration_s: float

    @classmethod
    def _from_core(cls, d: Dict[str, Any], hooks_left: int = 0) -> "HeapStats":
        return cls(
            rate=d["rate"],
            sampled=d["sampled"],
            live=d["live"],
            untracked=d["untracked"],
            dropped={
                k: d[k]
                for k in (
                    "torn",
                    "stack_table_full",
                    "unknown_frames",
                    "out_of_memory",
                    "numpy_no_gil",
                )
            },
            truncated=d["truncated"],
            hooks_lost=bool(d["hooks_lost"]),
            hooks_left=hooks_left,
            numpy=bool(d["numpy"]),
            profile_bytes=d["profile_bytes"],
            duration_s=d["duration_ns"] / 1e9,
        )


def _positive_int(name: str, value: object, top: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if top is not None and value > top:
        raise ValueError(f"{name} must be at most {top}, got {value!r}")
    return value


# numpy 1.22 brought data-memory handlers (PyDataMem_SetHandler).
_NUMPY_MIN = (1, 22)


def _numpy_api() -> object:
    """numpy's C-API capsule, for counting its array data. numpy is
    imported if it is not yet: a program that starts the profile first
    and imports numpy later is covered too."""
    try:
        import numpy
    except ImportError as e:
        raise ProfilerError(f"numpy=True, but numpy cannot be imported: {e}") from e
    version = tuple(int(p) for p in numpy.__version__.split(".")[:2] if p.isdigit())
    if version < _NUMPY_MIN:
        raise ProfilerError(
            f"numpy=True needs numpy 1.22 or newer (data-memory handlers); "
            f"this is numpy {numpy.__version__}"
        )
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return importlib.import_module(name)._ARRAY_API
        except (ImportError, AttributeError):
            continue
    raise ProfilerError(f"numpy {numpy.__version__}: its C API (_ARRAY_API) was not found")


def _check_kind(kind: object) -> bool:
    """True for "allocs", False for "heap"."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be 'heap' or 'allocs', got {kind!r}")
    return kind == "allocs"


class HeapProfiler(_Lifecycle):
    """Samples the allocations of Python's allocators, as Go's heap profile.

    On average one allocation per ``rate`` bytes allocated is sampled (a
    Poisson process over bytes, Go's ``MemProfileRate``), with the stack
    that made it; sampled blocks are followed until they are freed. The
    result is Go's heap profile in gzipped pprof: ``alloc_objects``,
    ``alloc_space``, ``inuse_objects`` and ``inuse_space``, unsampled so
    that the values estimate the true counts and bytes. ``kind="heap"``
    shows in-use space by default, ``kind="allocs"`` allocated space.

    Hooks cover the MEM and OBJ domains (``PyMem_Malloc``,
    ``PyObject_Malloc``): Python objects, and the buffers of lists, dicts,
    bytes and the like. Memory a C extension takes from ``malloc``
    directly is not seen. numpy's array data is not either, unless
    ``numpy=True`` (numpy 1.22 or newer): a numpy data-memory handler of
    samprof's then counts it, in the context where start() runs, the
    contexts copied from it later (asyncio tasks made afterwards) and
    every thread ``threading`` starts while the profile runs. Threads
    already running keep numpy's handler and are not counted.

    Example::

        prof = samprof.HeapProfiler()
        prof.start()
        ...
        open("heap.pb.gz", "wb").write(prof.snapshot())  # still running
        data = prof.stop()

        with samprof.HeapProfiler(rate=128 * 1024) as prof:
            work()
        open("allocs.pb.gz", "wb").write(prof.result)
    """

    def __init__(
        self,
        rate: int = _core.HEAP_RATE,
        *,
        max_depth: int = 256,
        max_live: int = _core.HEAP_MAX_LIVE,
        max_stacks: int = _core.MAX_SAMPLES,
        numpy: bool = False,
    ) -> None:
        self.rate = _positive_int("rate", rate)
        self.max_depth = _positive_int("max_depth", max_depth, _core.MAX_DEPTH)
        self.max_live = _positive_int("max_live", max_live)
        self.max_stacks = _positive_int("max_stacks", max_stacks)
        if not isinstance(numpy, bool):
            raise TypeError(f"numpy must be True or False, got {numpy!r}")
        self.numpy = numpy
        self._running = False
        #: The gzipped pprof of the last stop().
        self.result: Optional[bytes] = None
        #: Statistics as of the last snapshot() or stop().
        self.stats: Optional[HeapStats] = None

    def start(self) -> None:
        """Install the allocator hooks and start sampling. Raises
        ProfilerError if a heap profile is already running, or if
        ``numpy=True`` and numpy 1.22 or newer cannot be imported."""
        numpy_api = _numpy_api() if self.numpy else None
        with _slot.lock:
            if self._running:
                raise ProfilerError("this profiler is already running; call stop() first")
            if _core.heap_is_running():
                raise ProfilerError(
                    "a heap profile is already running in this process; stop it first"
                )
            try:
                _core.heap_start(
                    self.rate,
                    self.max_depth,
                    self.max_live,
                    tuple(_hidden_files),
                    self.max_stacks,
                    numpy_api,
                )
            except RuntimeError as e:  # numpy's handler could not be set
                if isinstance(e, ProfilerError):
                    raise
                raise ProfilerError(f"numpy=True: {e}") from e
            self._running = True
            _slot.active = self
            _arm_new_threads()

    def snapshot(self, kind: str = "heap") -> bytes:
        """The profile so far, as gzipped pprof; sampling goes on."""
        allocs = _check_kind(kind)
        with _slot.lock:
            if not self._running:
                raise ProfilerError("snapshot() called on a profiler that is not running")
            raw, stats = _core.heap_snapshot(allocs)
        self.stats = HeapStats._from_core(stats)
        return gzip.compress(raw, compresslevel=6, mtime=0)

    def _delta(self) -> Tuple[bytes, int, int]:
        """What the continuous agent sends: the allocations since the last
        _delta() (since start for the first) and what is in use now,
        uncompressed, without thread labels; with the span's time_nanos
        and duration_nanos, which follow the last one's exactly."""
        with _slot.lock:
            if not self._running:
                raise ProfilerError("the heap profile is not running")
            raw, stats = _core.heap_snapshot(False, True, False)
        self.stats = HeapStats._from_core(stats)
        return raw, stats["time_ns"], stats["duration_ns"]

    def stop(self, kind: str = "heap") -> bytes:
        """Remove the hooks; return the final profile as gzipped pprof."""
        allocs = _check_kind(kind)
        with _slot.lock:
            if not self._running:
                raise ProfilerError("stop() called on a profiler that is not running")
            try:
                (raw, stats), left = _core.heap_stop(allocs)
            finally:
                # The core stops even when the last profile cannot be made.
                self._running = False
                _slot.active = None
        self.stats = HeapStats._from_core(stats, left)
        if left and not self.stats.hooks_lost:
            warnings.warn(
                f"samprof: {left} allocator hook(s) stayed installed because another "
                "allocator (tracemalloc?) was installed above them; they pass every "
                "call through until that one is removed",
                RuntimeWarning,
                stacklevel=2,
            )
        if self.stats.hooks_lost:
            warnings.warn(
                "samprof: the allocator hooks were removed by someone else while the "
                "heap profile ran (tracemalloc.stop()?); frees after that were not "
                "seen, so in-use values are too high",
                RuntimeWarning,
                stacklevel=2,
            )
        self.result = gzip.compress(raw, compresslevel=6, mtime=0)
        return self.result
