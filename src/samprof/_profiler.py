"""The profiler classes: thin, typed wrappers over the C core."""

from __future__ import annotations

import atexit
import gc
import gzip
import math
import numbers
import os
import signal as _signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Dict, Optional, Tuple, Type, TypeVar

from samprof import _core

ProfilerError = _core.ProfilerError

_ENGINES = ("auto", "perf", "timer", "itimer")
# Files whose frames are samprof's own and never shown. The CLI adds its
# runner. Absolute paths, as in code objects.
_hidden_files = {os.path.abspath(__file__)}


def _arm_new_threads() -> None:
    """Makes every threading.Thread arm its own timer as it starts (in
    wall mode: be probed finely through its first period), put the heap
    profile's numpy handler in place when there is one, and give its name to
    the heap profile as it ends.

    The core finds new threads by rescanning /proc every 10 ms; a thread
    that lives shorter than that would go unsampled. In wall mode a thread
    that lives a period or less is seen by one tick or none. A heap profile's
    samples outlive their threads, whose names can no longer be looked up
    when the profile is written. Installed once; it costs five C calls per
    thread, and nothing more unless a profile runs.
    """
    original = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]
    if getattr(original, "_samprof_hook", False):
        return

    def _bootstrap_inner(self: threading.Thread) -> None:
        if _core.is_running():
            _core._arm_this_thread()
        if _core.heap_is_running():
            _core._heap_numpy_thread()
        try:
            original(self)
        finally:
            if _core.is_running():
                _core._thread_exiting()
            if _core.heap_is_running():
                _core._heap_thread_exiting(self.name)

    _bootstrap_inner._samprof_hook = True  # type: ignore[attr-defined]
    threading.Thread._bootstrap_inner = _bootstrap_inner  # type: ignore[attr-defined]


_ALLOWED_SIGNALS = {_signal.SIGPROF, _signal.SIGVTALRM, _signal.SIGUSR1, _signal.SIGUSR2}


def _check_signal(signum: object) -> int:
    if isinstance(signum, bool) or not isinstance(signum, int):
        raise TypeError("signal must be a signal number such as signal.SIGPROF")
    signum = int(signum)
    if signum not in _ALLOWED_SIGNALS and not _signal.SIGRTMIN <= signum <= _signal.SIGRTMAX:
        raise ValueError(
            f"signal {signum} cannot be used for sampling; use SIGPROF, SIGVTALRM, "
            "SIGUSR1, SIGUSR2 or a real-time signal (SIGRTMIN..SIGRTMAX)"
        )
    return signum


def _hide_file(path: str) -> None:
    """Never show frames from ``path`` (samprof's own modules)."""
    _hidden_files.add(path if path.startswith("<") else os.path.abspath(path))


@dataclass(frozen=True)
class ProfileStats:
    """What a finished profile contains and how it was taken.

    ``engine`` names the timer that delivered most samples: ``"perf"``
    (per-thread perf-event task clock, not bound to the kernel tick),
    ``"timer"`` (per-thread POSIX CPU timer, tick-bound, overruns weighted) or
    ``"itimer"`` (the process-wide ``ITIMER_PROF`` fallback).
    ``effective_hz`` is the rate at which signals actually arrived per
    CPU-second; ``dropped`` counts samples lost, by reason.
    ``backlog`` says how many samples waited in the collector's backlog
    because some thread held the GIL for longer than the sample ring lasts
    (``samples``), and the most memory that backlog took (``peak_bytes``,
    at most 16 MiB: beyond it samples are dropped as ``buffer_full``).
    ``wall`` (wall mode only) counts the sampler's ``ticks``, the thread
    stacks it read (``stacks_read``) and the samples of threads that stood
    where they waited, added up without a look at their stacks
    (``deferred``).
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
    backlog: Dict[str, int] = field(default_factory=dict)
    wall: Dict[str, int] = field(default_factory=dict)

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
            backlog=dict(d.get("backlog", {})),
            wall=(
                {"ticks": d["ticks"], "stacks_read": d["walks"], "deferred": d["deferred"]}
                if d["mode"] == "wall"
                else {}
            ),
        )


def _remove_gc_callback() -> None:
    """Stop telling the core where collections start and end."""
    try:
        gc.callbacks.remove(_core.gc_callback)
    except ValueError:
        pass


def _check_hz(hz: object) -> int:
    if isinstance(hz, bool) or not isinstance(hz, numbers.Real):
        raise TypeError(f"hz must be a number of samples per second, not {type(hz).__name__}")
    if not math.isfinite(hz) or hz != int(hz):
        raise ValueError(f"hz must be a whole number of samples per second, got {hz!r}")
    if not 1 <= hz <= _core.MAX_HZ:
        raise ValueError(f"hz must be between 1 and {_core.MAX_HZ}, got {hz!r}")
    return int(hz)


_L = TypeVar("_L", bound="_Lifecycle")


class _Lifecycle:
    """What every profiler class shares: ``running``, and use as a context
    manager that starts it and stops it at the end of the block."""

    _running = False

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> bytes:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._running

    def __enter__(self: _L) -> _L:
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


def _discard(prof: Optional[_Lifecycle]) -> None:
    """Stops prof if it runs, at interpreter exit: the profile, errors and
    warnings go nowhere."""
    if prof is not None and prof._running:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prof.stop()
        except Exception:
            pass


class _Slot:
    """The one profile of a kind that may run in a process: a lock that
    orders start and stop from several threads, and the profiler that
    runs, if any. At interpreter exit it is stopped (the profile is
    discarded); in a forked child it is marked stopped (the core stopped
    the child's copy), and the parent's profile stays with the parent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: Optional[_Lifecycle] = None
        atexit.register(self._at_exit)
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _at_exit(self) -> None:
        _discard(self.active)

    def _after_fork_in_child(self) -> None:
        self.lock = threading.Lock()
        if self.active is not None:
            self.active._running = False
            self.active = None


# CPU and wall profiles share the core's one time-profile slot. Its
# collector and wall sampler threads take the GIL, so they must be gone
# before the interpreter finalizes: the slot stops them at exit.
_slot = _Slot()


class _Profiler(_Lifecycle):
    _mode = "cpu"

    def __init__(
        self,
        hz: int = 100,
        *,
        engine: str = "auto",
        signal: int = _signal.SIGPROF,
        max_depth: int = 256,
        max_stacks: int = _core.MAX_SAMPLES,
    ) -> None:
        self.hz = _check_hz(hz)
        if engine not in _ENGINES:
            raise ValueError(f"engine must be one of {', '.join(_ENGINES)}, got {engine!r}")
        self.engine = engine
        self.signal = _check_signal(signal)
        if (
            isinstance(max_depth, bool)
            or not isinstance(max_depth, int)
            or not 1 <= max_depth <= _core.MAX_DEPTH
        ):
            raise ValueError(
                f"max_depth must be an int between 1 and {_core.MAX_DEPTH}, got {max_depth!r}"
            )
        self.max_depth = max_depth
        if isinstance(max_stacks, bool) or not isinstance(max_stacks, int) or max_stacks < 1:
            raise ValueError(f"max_stacks must be a positive int, got {max_stacks!r}")
        self.max_stacks = max_stacks
        # False: the threads' samples of a stack are added up, and carry no
        # thread name or id (samprof.continuous: a fleet backend makes a
        # series of every label value).
        self._by_thread = True
        self._running = False
        #: The gzipped pprof of the last finished profile (set by ``stop``).
        self.result: Optional[bytes] = None
        #: Statistics of the last finished profile (set by ``stop``).
        self.stats: Optional[ProfileStats] = None

    def start(self) -> None:
        """Start sampling. Raises ProfilerError if a profile is already
        running in this process or the signal is taken."""
        with _slot.lock:
            if self._running:
                raise ProfilerError("this profiler is already running; call stop() first")
            _core.start(
                self._mode,
                self.hz,
                self.engine,
                self.signal,
                self.max_depth,
                tuple(_hidden_files),
                self.max_stacks,
                self._by_thread,
            )
            self._running = True
            _slot.active = self
            _arm_new_threads()
            if _core.gc_callback not in gc.callbacks:
                gc.callbacks.append(_core.gc_callback)

    def stop(self) -> bytes:
        """Stop sampling and return the profile as gzipped pprof bytes."""
        with _slot.lock:
            if not self._running:
                raise ProfilerError("stop() called on a profiler that is not running")
            self._running = False
            _slot.active = None
            _remove_gc_callback()
            raw, stats = _core.stop()
        self.stats = ProfileStats._from_core(stats)
        self.result = gzip.compress(raw, compresslevel=6, mtime=0)
        return self.result

    def cut(self) -> bytes:
        """Return the profile since start (or the last cut) as gzipped
        pprof and go on sampling into an empty one, as a continuous
        profiler sends one part per interval.

        No sample is lost or counted twice between parts, and each part's
        ``time_nanos`` is the previous one's plus its ``duration_nanos``.
        ``stats`` describes the part. The cut itself runs with the GIL held
        and takes about as long as encoding the part.
        """
        raw = self._cut()[0]
        return gzip.compress(raw, compresslevel=6, mtime=0)

    def _cut(
        self, cpu_part: bool = False, thread_labels: bool = True
    ) -> Tuple[bytes, bytes, int, int]:
        """cut(), uncompressed: (the part, with cpu_part (wall) its on-CPU
        samples as a CPU profile (else b""), its time_nanos and
        duration_nanos)."""
        with _slot.lock:
            if not self._running:
                raise ProfilerError("cut() called on a profiler that is not running")
            raw, stats, *cpu = _core.cut(cpu_part, thread_labels)
        self.stats = ProfileStats._from_core(stats)
        return raw, cpu[0] if cpu else b"", stats["time_ns"], stats["duration_ns"]

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


def _after_fork_in_child() -> None:
    # Profiling is off in a forked child (the C atfork handler stopped the
    # time profile; _after_fork_child frees it and stops the heap profile):
    # start a new profiler in the child to profile it.
    _remove_gc_callback()
    _core._after_fork_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


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
    another handler already owns it. ``max_depth`` bounds the frames kept
    per sample (deeper stacks lose their root part and show
    ``<truncated>``); ``max_stacks`` bounds the distinct stacks kept (the
    rest are counted under ``<samprof: stack table full>``).
    """

    _mode = "cpu"


class WallProfiler(_Profiler):
    """Samples every Python thread at the rate, whatever it is doing.

    Running Python, running C code with the GIL released, blocked in I/O,
    sleeping, waiting on a lock or for the GIL: each Python thread gets
    ``hz`` samples per second of wall time, with sample types
    ``samples/count`` and ``wall/nanoseconds``. Each sample carries the
    label ``thread_state`` = ``on-cpu`` or ``off-cpu`` (whether the thread
    used CPU during the interval), so one profile answers both "where does
    time go" and "where do we wait"::

        with samprof.WallProfiler(hz=100) as prof:
            serve_for_a_while()
        open("wall.pb.gz", "wb").write(prof.result)
        # go tool pprof -tagfocus thread_state=off-cpu wall.pb.gz

    No blocking call is interrupted: a sampler thread takes the GIL at each
    tick (when every other thread is detached and cannot change its stack)
    and reads each thread's frames. Where perf events are available, a
    thread running Python gets its on-CPU samples from a per-thread event
    that counts user-mode time only, so its signal never arrives while the
    thread waits in a system call. The ``engine`` argument is accepted for
    symmetry with CPUProfiler and ignored; ``signal`` is the one that perf
    event delivers.
    """

    _mode = "wall"
