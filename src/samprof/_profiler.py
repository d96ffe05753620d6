"""The profiler classes: thin, typed wrappers over the C core."""

from __future__ import annotations

import gzip
import math
import numbers
import signal as _signal
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Dict, Optional, Type

from samprof import _samprof

ProfilerError = _samprof.ProfilerError

_ENGINES = ("auto", "perf", "timer", "itimer")
_MAX_HZ = 100_000
# The core handles one profile at a time; this lock makes start/stop from
# several Python threads well ordered.
_lock = threading.Lock()


@dataclass(frozen=True)
class ProfileStats:
    """What a finished profile contains and how it was taken.

    ``engine`` names the timer that delivered most samples: ``"perf"``
    (per-thread perf-event task clock, not bound to the kernel tick),
    ``"timer"`` (per-thread POSIX CPU timer, tick-bound, overruns weighted) or
    ``"itimer"`` (the process-wide ``ITIMER_PROF`` fallback).
    ``effective_hz`` is the rate at which signals actually arrived per
    CPU-second; ``dropped`` counts samples lost, by reason.
    """

    mode: str
    engine: str
    requested_hz: int
    effective_hz: float
    samples: int
    signals: int
    threads_by_engine: Dict[str, int]
    dropped: Dict[str, int]
    truncated: int
    duration_s: float

    @classmethod
    def _from_core(cls, d: Dict[str, Any]) -> "ProfileStats":
        return cls(
            mode=d["mode"],
            engine=d["engine"],
            requested_hz=d["requested_hz"],
            effective_hz=d["effective_hz"],
            samples=d["samples"],
            signals=d["signals"],
            threads_by_engine=dict(d["threads_by_engine"]),
            dropped=dict(d["dropped"]),
            truncated=d["truncated"],
            duration_s=d["duration_ns"] / 1e9,
        )


def _check_hz(hz: object) -> int:
    if isinstance(hz, bool) or not isinstance(hz, numbers.Real):
        raise TypeError(f"hz must be a number of samples per second, not {type(hz).__name__}")
    if not math.isfinite(hz) or hz != int(hz):
        raise ValueError(f"hz must be a whole number of samples per second, got {hz!r}")
    if not 1 <= hz <= _MAX_HZ:
        raise ValueError(f"hz must be between 1 and {_MAX_HZ}, got {hz!r}")
    return int(hz)


class _Profiler:
    _mode = "cpu"

    def __init__(
        self,
        hz: int = 100,
        *,
        engine: str = "auto",
        signal: int = _signal.SIGPROF,
        max_depth: int = 256,
    ) -> None:
        self.hz = _check_hz(hz)
        if engine not in _ENGINES:
            raise ValueError(f"engine must be one of {', '.join(_ENGINES)}, got {engine!r}")
        self.engine = engine
        if isinstance(signal, bool) or not isinstance(signal, int):
            raise TypeError("signal must be a signal number such as signal.SIGPROF")
        self.signal = int(signal)
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 1 <= max_depth <= 4096:
            raise ValueError(f"max_depth must be an int between 1 and 4096, got {max_depth!r}")
        self.max_depth = max_depth
        self._running = False
        #: The gzipped pprof of the last finished profile (set by ``stop``).
        self.result: Optional[bytes] = None
        #: Statistics of the last finished profile (set by ``stop``).
        self.stats: Optional[ProfileStats] = None

    def start(self) -> None:
        """Start sampling. Raises ProfilerError if a profile of the same
        kind is already running in this process or the signal is taken."""
        with _lock:
            if self._running:
                raise ProfilerError("this profiler is already running; call stop() first")
            _samprof.start(
                self._mode, self.hz, self.engine, self.signal, self.max_depth, __file__
            )
            self._running = True

    def stop(self) -> bytes:
        """Stop sampling and return the profile as gzipped pprof bytes."""
        with _lock:
            if not self._running:
                raise ProfilerError("stop() called on a profiler that is not running")
            self._running = False
            raw, stats = _samprof.stop()
        self.stats = ProfileStats._from_core(stats)
        self.result = gzip.compress(raw, compresslevel=6, mtime=0)
        return self.result

    def profile(self, seconds: float) -> bytes:
        """Profile the whole process for ``seconds`` and return gzipped pprof.

        The calling thread sleeps meanwhile, so it adds no samples.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
            raise TypeError(f"seconds must be a number, not {type(seconds).__name__}")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
        self.start()
        try:
            time.sleep(seconds)
        finally:
            data = self.stop()
        return data

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._running

    def __enter__(self) -> "_Profiler":
        self.start()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._running:
            self.stop()


class CPUProfiler(_Profiler):
    """Samples the CPU time of every thread of the process.

    Each thread is sampled by its own CPU-time timer, so a thread blocked in
    a system call gets no samples, and threads without a Python thread state
    appear as the pseudo-frame ``<native thread>``. The result is gzipped
    pprof with sample types ``samples/count`` and ``cpu/nanoseconds``.

    Example::

        prof = samprof.CPUProfiler(hz=1000)
        prof.start()
        handle_requests()
        open("cpu.pb.gz", "wb").write(prof.stop())
        print(prof.stats.engine, prof.stats.effective_hz)

    ``engine`` is ``"auto"`` (perf events, falling back per thread to POSIX
    CPU timers, then to the process-wide ``ITIMER_PROF``), or one of
    ``"perf"``, ``"timer"``, ``"itimer"`` to force one. ``signal`` is the
    signal the timers deliver (``SIGPROF`` by default); starting fails if
    another handler already owns it.
    """

    _mode = "cpu"
