"""What samprof.wsgi.ProfilerMiddleware and samprof.asgi.ProfilerMiddleware
share: which requests to profile, the labels every profiled request's
samples carry, the backend that profiles, and the files each process
writes.

A request goes through :class:`Profiling` in three calls: ``select`` (a
dict lookup when nothing is to be profiled), ``begin`` before the
application runs, ``end`` after its response; ``set_route`` and
``set_status`` in between relabel the rest of it. A backend (the
:class:`Backend` interface) does the profiling: :class:`SamplingBackend`
(samprof's CPU or wall sampler) or :class:`CProfileBackend`.
:class:`Timing` makes the Server-Timing header; :class:`profiled` runs a
function or block outside requests the way a request runs.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import gc
import hmac
import inspect
import os
import random
import signal
import sys
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from samprof import pprof

__all__ = [
    "Backend",
    "CProfileBackend",
    "RequestInfo",
    "SamplingBackend",
    "profiled",
    "set_route",
]

# The label that tells concurrent triggered requests' samples apart: a
# small pool of values, so that the label sets stay few (samprof keeps
# every label set for the life of the process). One of
# samprof._labels.INTERNAL_LABELS, which current_labels() leaves out.
_TRIGGER_LABEL = "samprof_request"
_TRIGGER_SLOTS = 64
# The answer to a triggered request that got no profile.
NO_PROFILE = (
    b"samprof: this request could not be profiled: another CPU or wall profile runs "
    b"in this process, or too many requests asked at once\n"
)


class RequestInfo:
    """One request, as the middleware and its backend see it. ``route``
    is the route template once the application told it (``set_route``),
    else the path's first segment; ``status`` the response's, once it
    started; ``wants_profile``: a triggered request whose response is its
    own profile."""

    __slots__ = (
        "method",
        "path",
        "route",
        "status",
        "wants_profile",
        "extra_labels",
        "labels",
        "state",
        "token",
    )

    def __init__(self, method: str, path: str, wants_profile: bool) -> None:
        self.method = method
        self.path = path
        self.route = _route_fallback(path)
        self.status: Optional[int] = None
        self.wants_profile = wants_profile
        # Labels a backend adds to the request's own (in begin).
        self.extra_labels: Dict[str, str] = {}
        # samprof.labels blocks entered for this request, innermost last.
        self.labels: List[Any] = []
        self.state: Any = None  # the backend's
        self.token: Any = None


def _route_fallback(path: str) -> str:
    """The path's first segment, e.g. ``/users/…`` for ``/users/42``: a
    label must not carry ids (each value is kept for the whole process)."""
    parts = path.lstrip("/").split("/", 1)
    first = parts[0][:64]
    if not first:
        return "/"
    return f"/{first}/…" if len(parts) > 1 and parts[1] else f"/{first}"


class Backend:
    """What the middleware asks of a profiler. Subclass it (or write any
    object with these methods) and pass an instance as ``backend=``.

    Calls come from the threads that serve requests, several at once; a
    pre-fork server's workers each use their copy of the object from the
    fork on, so a backend keys its state by process where it matters.
    """

    #: File name suffix of what ``collect`` returns.
    suffix = ".pb.gz"

    def begin(self, request: RequestInfo) -> None:
        """Called before the application runs, in the request's thread
        and context; may set ``request.state``, and add labels to the
        request's (``request.extra_labels``)."""

    def end(self, request: RequestInfo) -> Optional[bytes]:
        """Called after the response, in the same thread and context.
        Returns the request's own profile when ``request.wants_profile``
        (None: not available), else None."""
        return None

    def collect(self) -> Optional[bytes]:
        """Everything profiled since the last call, as one file's content,
        or None when there is nothing. Called every flush interval, from
        another thread than the requests'."""
        return None

    def close(self) -> Optional[bytes]:
        """The last ``collect``; no call follows in this process."""
        return self.collect()


class SamplingBackend(Backend):
    """samprof's sampler: ``mode`` "cpu" (default) or "wall", ``hz``.

    With ``continuous`` (the middleware's ``when="always"``) the profiler
    runs from the first request to the end of the process, and every
    sample goes to the files, the process's other threads included;
    otherwise it runs while a profiled request does, and the files keep
    the samples of profiled requests (those with a ``route`` label). A
    request's samples carry its labels (``route``, ``method``, then
    ``status``) across threads and asyncio tasks alike.

    Only one CPU or wall profile can run in a process: while another one
    does (``samprof.serve``'s ``/profile``, a ``CPUProfiler`` of the
    program's own), requests are served unprofiled and counted in
    ``unprofiled``.
    """

    suffix = ".pb.gz"

    def __init__(self, mode: str = "cpu", hz: int = 100, *, continuous: bool = False) -> None:
        if mode not in ("cpu", "wall"):
            raise ValueError(f"mode must be 'cpu' or 'wall', got {mode!r}")
        self.mode = mode
        self.hz = hz
        self.continuous = continuous
        self.unprofiled = 0
        self._lock = threading.Lock()
        self._pid = -1
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._profiler: Any = None
        self._active = 0  # profiled requests running
        # For the next collect: profiles as the sampler wrote them, or
        # parsed when a triggered request's samples were taken out.
        self._parts: List[Union[bytes, pprof.Profile]] = []
        self._free_slots = list(range(_TRIGGER_SLOTS - 1, -1, -1))
        # Samples of each running triggered request, gathered at each stop.
        self._slot_parts: Dict[int, List[pprof.Profile]] = {}
        self._closed = False

    def _own(self) -> None:
        # In a forked child the parent's profiler is gone (samprof stops it
        # there); start afresh.
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._reset()

    def _start(self) -> bool:
        from samprof._profiler import CPUProfiler, ProfilerError, WallProfiler

        cls = CPUProfiler if self.mode == "cpu" else WallProfiler
        profiler = cls(self.hz)
        try:
            profiler.start()
        except ProfilerError:
            return False
        self._profiler = profiler
        return True

    def _stop(self) -> None:
        """Stops the profiler (lock held) and sorts what it recorded: each
        running triggered request's samples to its slot, the rest (or the
        profiled requests' share of it) to the next collect."""
        profiler, self._profiler = self._profiler, None
        if profiler is None or not profiler.running:
            return  # (samprof discards a profile left running at exit)
        data = profiler.stop()
        if not self._slot_parts:
            # Sorted out by collect, after the lock is released: requests
            # do not wait while a large profile is parsed.
            self._parts.append(data)
            return
        profile = pprof.read(data)
        for slot, parts in self._slot_parts.items():
            # Kept even when empty: it carries the profile's types.
            parts.append(pprof.filter(profile, {_TRIGGER_LABEL: str(slot)}))
        self._parts.append(profile)

    def begin(self, request: RequestInfo) -> None:
        with self._lock:
            self._own()
            if self._closed:
                return
            if self._profiler is None and not self._start():
                self.unprofiled += 1
                return
            self._active += 1
            slot = None
            if request.wants_profile and self._free_slots:
                slot = self._free_slots.pop()
                self._slot_parts[slot] = []
            request.state = (self._pid, slot)
        if slot is not None:
            request.extra_labels[_TRIGGER_LABEL] = str(slot)

    def end(self, request: RequestInfo) -> Optional[bytes]:
        if request.state is None:
            return None
        pid, slot = request.state
        with self._lock:
            if pid != os.getpid():
                return None
            self._active -= 1
            mine: Optional[List[pprof.Profile]] = None
            if slot is not None:
                # The profile so far holds this request's last samples.
                self._stop()
                mine = self._slot_parts.pop(slot)
                self._free_slots.append(slot)
            if self._active == 0 and not self.continuous:
                self._stop()
            elif self._profiler is None and not self._closed and not self._start():
                self.unprofiled += 1
        if mine is None:
            return None
        return pprof.write(_without_label(pprof.merge(mine), _TRIGGER_LABEL))

    def collect(self) -> Optional[bytes]:
        with self._lock:
            self._own()
            if self._profiler is not None:
                self._stop()
                if not self._closed and not self._start():
                    self.unprofiled += 1
            parts, self._parts = self._parts, []
        if self.continuous and len(parts) == 1 and isinstance(parts[0], bytes):
            return parts[0]  # one stretch of everything: the profile as it came
        kept = []
        for part in parts:
            profile = pprof.read(part) if isinstance(part, bytes) else part
            if not self.continuous:
                profile = _with_label(profile, ("route", "function"))
            if profile.samples:
                kept.append(_without_label(profile, _TRIGGER_LABEL))
        if not kept:
            return None
        return pprof.write(pprof.merge(kept))

    def close(self) -> Optional[bytes]:
        with self._lock:
            self._own()
            self._closed = True
        return self.collect()


# Since 3.12 cProfile is built on sys.monitoring: one profiler at a time
# watches every thread of the process. Before, each thread has its own.
_CPROFILE_PER_PROCESS = sys.version_info >= (3, 12)


class _CProfileSlot:
    """The ``cProfile.Profile`` that the requests of one thread (one
    process since 3.12) share: enabled while any of them runs, so that a
    request pays for enabling and disabling it, and the statistics are
    made at a flush, not in the request."""

    __slots__ = ("profiler", "active", "own", "used", "retire")

    def __init__(self) -> None:
        import cProfile

        self.profiler = cProfile.Profile()
        self.active = 0  # requests running under ``profiler``
        self.own = False  # a triggered request's own profiler runs here
        self.used = False  # ``profiler`` ran since it was made
        self.retire = False  # a flush wants ``profiler`` while it runs


class CProfileBackend(Backend):
    """The standard library's ``cProfile``: exact call counts and times of
    every function the profiled requests ran, written as ``pstats`` files
    (``.prof``: ``pstats.Stats(path)``, ``samprof top DIR``, snakeviz).

    A deterministic profiler slows the code it watches several times over,
    so pick requests (``when=0.01``, ``"trigger"``) rather than all.
    Requests share one profiler per thread (per process since Python 3.12,
    where cProfile watches every thread): it runs while any of them does,
    so requests whose coroutines interleave on an event loop are all
    profiled, and since 3.12 a profile also holds what other threads ran
    meanwhile. A triggered request gets a profiler of its own, which can
    run only while no other request is profiled in its thread (its
    process since 3.12); a request that finds the profiler taken, by such
    a request or by a cProfile of the program's own, is served unprofiled
    and counted in ``unprofiled``.
    """

    suffix = ".prof"

    def __init__(self) -> None:
        import cProfile  # noqa: F401 - loaded here, not in a profiled request
        import pstats  # noqa: F401

        self.unprofiled = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # Keyed by thread ident, or 0 for the process.
        self._slots: Dict[int, _CProfileSlot] = {}
        # Profilers that ran and await the next collect.
        self._done: List[Any] = []

    def _slot(self) -> _CProfileSlot:
        if self._pid != os.getpid():  # a forked child: the parent's are not ours
            self._pid, self._slots, self._done = os.getpid(), {}, []
        key = 0 if _CPROFILE_PER_PROCESS else threading.get_ident()
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _CProfileSlot()
        return slot

    def _renew(self, slot: _CProfileSlot) -> None:
        """Hand a running shared profiler to the next collect and go on
        with a new one (in the slot's own thread: before 3.12 enabling
        acts on the calling thread)."""
        import cProfile

        slot.profiler.disable()
        self._done.append(slot.profiler)
        slot.profiler = cProfile.Profile()
        slot.retire = False
        slot.profiler.enable()

    def begin(self, request: RequestInfo) -> None:
        with self._lock:
            slot = self._slot()
            if slot.own or (request.wants_profile and slot.active):
                self.unprofiled += 1
                return
            if request.wants_profile:
                import cProfile

                profiler = cProfile.Profile()
            else:
                if slot.active:
                    if slot.retire:
                        self._renew(slot)
                    slot.active += 1
                    request.state = (self._pid, slot, None)
                    return
                profiler = slot.profiler
            try:
                profiler.enable()
            except ValueError:  # 3.12+: a profiler of the program's own runs
                self.unprofiled += 1
                return
            if request.wants_profile:
                slot.own = True
                request.state = (self._pid, slot, profiler)
            else:
                slot.active, slot.used = 1, True
                request.state = (self._pid, slot, None)

    def end(self, request: RequestInfo) -> Optional[bytes]:
        if request.state is None:
            return None
        pid, slot, own = request.state
        if own is None:
            with self._lock:
                slot.active -= 1
                if slot.active == 0:
                    slot.profiler.disable()
                elif slot.retire and self._pid == pid == os.getpid():
                    self._renew(slot)
            return None
        own.disable()
        data = None
        if pid == os.getpid():
            import marshal
            import pstats

            try:
                # Made before a collect can see ``own`` (which makes them
                # again: create_stats keeps none).
                data = marshal.dumps(pstats.Stats(own).stats)
            except TypeError:  # it saw no call
                pass
        with self._lock:
            slot.own = False
            if self._pid == pid == os.getpid():
                self._done.append(own)
        return data

    def collect(self) -> Optional[bytes]:
        import marshal
        import pstats

        with self._lock:
            self._slot()
            done, self._done = self._done, []
            for key, slot in list(self._slots.items()):
                if slot.active or slot.own:
                    slot.retire = slot.active > 0
                    continue
                if slot.used:
                    done.append(slot.profiler)
                # A thread's slot goes with its data: the thread may be gone.
                del self._slots[key]
        total: Any = None
        for profiler in done:
            try:
                stats = pstats.Stats(profiler)
            except TypeError:  # it saw no call
                continue
            if total is None:
                total = stats
            else:
                total.add(stats)
        return None if total is None else marshal.dumps(total.stats)


def _with_label(profile: pprof.Profile, keys: Tuple[str, ...]) -> pprof.Profile:
    """The samples that carry one of the label keys, whatever its value."""
    parts = []
    for key in keys:
        values = {label.value for s in profile.samples for label in s.labels if label.key == key}
        if values:
            parts.append(pprof.filter(profile, {key: values}))
    if len(parts) == 1:
        return parts[0]
    if parts:
        return pprof.merge(parts)
    return pprof.filter(profile, {keys[0]: ()})  # none: an empty profile of its types


def _without_label(profile: pprof.Profile, key: str) -> pprof.Profile:
    for sample in profile.samples:
        if any(label.key == key for label in sample.labels):
            sample.labels = [label for label in sample.labels if label.key != key]
    # Samples that differed only by the dropped label are one stack now.
    return pprof.merge([profile])


class _Files:
    """One process's files in a directory: ``{name}.{pid}.{seq}{suffix}``,
    written whole (a temporary name, then a rename) so that a reader never
    sees half a file."""

    def __init__(self, directory: str, name: str, suffix: str) -> None:
        self.directory = directory
        self.name = name
        self.suffix = suffix
        self._seq = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def write(self, data: bytes) -> str:
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._seq = os.getpid(), 0
            seq, self._seq = self._seq, self._seq + 1
        path = os.path.join(self.directory, f"{self.name}.{self._pid}.{seq}{self.suffix}")
        # Hidden until whole: readers of the directory skip it.
        partial = os.path.join(self.directory, f".{os.path.basename(path)}.tmp")
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, path)
        return path


# The profiled request the calling context serves, for set_route.
_current: contextvars.ContextVar[Optional[RequestInfo]] = contextvars.ContextVar(
    "samprof.request", default=None
)


_labels_type: Any = None


def _labels(**pairs: str) -> Any:
    """A samprof.labels block (the module is loaded by then: Profiling)."""
    global _labels_type
    if _labels_type is None:
        from samprof._labels import labels

        _labels_type = labels
    return _labels_type(**pairs)


def set_route(template: str) -> None:
    """Name the route of the request being served, e.g. ``/users/{id}``
    (a template, never the path with its ids): samples from here to the
    end of the request carry it as their ``route`` label. Call it from the
    application once it routed (Flask: ``request.url_rule.rule``; Django:
    ``request.resolver_match.route``); outside a profiled request it does
    nothing. Starlette and FastAPI routes are found without it."""
    request = _current.get()
    if request is None or not request.labels or request.route == template:
        return
    request.route = template
    block = _labels(route=template)
    block.__enter__()
    request.labels.append(block)


def set_status(request: RequestInfo, status: int) -> None:
    """The response's status is known: the request's samples from here on
    carry its class (``2xx``)."""
    request.status = status
    if not request.labels:
        return
    block = _labels(status=f"{status // 100}xx")
    block.__enter__()
    request.labels.append(block)


# Seconds each thread spent in the cyclic GC (gc.callbacks), for
# Server-Timing; the callback is installed by the first middleware that
# asks for it.
_gc_local = threading.local()
_gc_timer_installed = False


def _gc_timer(phase: str, info: Dict[str, int]) -> None:
    if phase == "start":
        _gc_local.started = time.perf_counter()
        return
    started = getattr(_gc_local, "started", None)
    if started is not None:
        _gc_local.total = getattr(_gc_local, "total", 0.0) + time.perf_counter() - started
        _gc_local.started = None


def _gc_seconds() -> float:
    return getattr(_gc_local, "total", 0.0)


def _install_gc_timer() -> None:
    global _gc_timer_installed
    if not _gc_timer_installed:
        _gc_timer_installed = True
        gc.callbacks.append(_gc_timer)


class Timing:
    """One request's Server-Timing: wall time since it began, and the CPU
    and cyclic-GC time of its thread while it ran (``enter``/``leave``
    around each stretch it runs: the whole request for WSGI, each step of
    its task for ASGI, so that requests interleaving on one event loop are
    each timed for their own steps)."""

    __slots__ = ("_wall0", "cpu", "gc", "_cpu0", "_gc0", "_inside")

    def __init__(self) -> None:
        self._wall0 = time.perf_counter()
        self.cpu = 0.0
        self.gc = 0.0
        self._inside = False
        self._cpu0 = self._gc0 = 0.0

    def enter(self) -> None:
        self._inside = True
        self._cpu0 = time.thread_time()
        self._gc0 = _gc_seconds()

    def leave(self) -> None:
        if self._inside:
            self._inside = False
            self.cpu += time.thread_time() - self._cpu0
            self.gc += _gc_seconds() - self._gc0

    def header(self) -> str:
        """The Server-Timing value so far (milliseconds)."""
        cpu, gc_time = self.cpu, self.gc
        if self._inside:
            cpu += time.thread_time() - self._cpu0
            gc_time += _gc_seconds() - self._gc0
        total = time.perf_counter() - self._wall0
        return f"total;dur={total * 1e3:.1f}, cpu;dur={cpu * 1e3:.1f}, gc;dur={gc_time * 1e3:.1f}"


class Profiling:
    """The middleware's options, checked once; see
    ``samprof.wsgi.ProfilerMiddleware`` for what each means."""

    def __init__(
        self,
        *,
        backend: Union[str, Backend] = "sampling",
        when: Union[str, float, Callable[[Any], bool]] = "always",
        profile_dir: Optional[str] = None,
        flush_interval: float = 60.0,
        name: str = "samprof",
        mode: str = "cpu",
        hz: int = 100,
        trigger_param: str = "samprof",
        trigger_header: str = "X-Samprof",
        trigger_token: Optional[str] = None,
        respond_with_profile: bool = True,
        server_timing: bool = False,
    ) -> None:
        self.always = when == "always"
        self.fraction: Optional[float] = None
        self.predicate: Optional[Callable[[Any], bool]] = None
        self.trigger = when == "trigger"
        if isinstance(when, bool) or not (
            when in ("always", "trigger") or isinstance(when, (int, float)) or callable(when)
        ):
            raise ValueError(
                f"when must be 'always', 'trigger', a fraction or a function, got {when!r}"
            )
        if isinstance(when, (int, float)):
            if not 0 < when <= 1:
                raise ValueError(
                    f"when, as a fraction of the requests, must be in (0, 1], got {when}"
                )
            self.fraction = float(when)
        elif callable(when):
            self.predicate = when
        if trigger_token is not None and not trigger_token:
            raise ValueError("trigger_token must be a non-empty string or None")
        if not flush_interval > 0:
            raise ValueError(f"flush_interval must be positive, got {flush_interval!r}")
        if backend == "sampling":
            backend = SamplingBackend(mode, hz, continuous=self.always)
        elif backend == "cprofile":
            backend = CProfileBackend()
        elif backend == "labels":
            # Labels each request's samples for whoever samples the process
            # (samprof.continuous, a /debug/pprof capture); profiles nothing.
            backend = Backend()
        elif isinstance(backend, str):
            raise ValueError(
                "backend must be 'sampling', 'cprofile', 'labels' or a Backend object, "
                f"got {backend!r}"
            )
        self.backend: Backend = backend
        # Imported now (it loads samprof's core), not inside the first
        # profiled request, where a cProfile backend would count it.
        import samprof._labels  # noqa: F401

        self.trigger_param = trigger_param
        self.trigger_header = trigger_header.lower()
        self.trigger_environ = "HTTP_" + trigger_header.upper().replace("-", "_")
        self.trigger_token = trigger_token
        self.respond_with_profile = respond_with_profile
        self.server_timing = bool(server_timing)
        if self.server_timing:
            _install_gc_timer()
        self.flush_interval = flush_interval
        self.files: Optional[_Files] = None
        self.files_suffix: str = getattr(backend, "suffix", ".pb.gz")
        if profile_dir is not None:
            os.makedirs(profile_dir, exist_ok=True)
            self.files = _Files(profile_dir, name, self.files_suffix)
            global _last_with_files
            _last_with_files = self
        self._flusher_pid = -1
        self._closed_pid = -1
        self._flusher_lock = threading.Lock()
        self._stop_flusher = threading.Event()
        # Requests left unprofiled because the when= function raised.
        self.predicate_errors = 0

    # -- which requests -----------------------------------------------------

    def _triggered(self, query: str, header: Optional[str]) -> bool:
        value = header
        if value is None and query and self.trigger_param in query:
            values = urllib.parse.parse_qs(query, keep_blank_values=True).get(self.trigger_param)
            value = values[0] if values else None
        if value is None:
            return False
        if self.trigger_token is None:
            return True
        return hmac.compare_digest(value.encode(), self.trigger_token.encode())

    def select(self, request_view: Any, query: str, header: Optional[str]) -> Optional[bool]:
        """None: not profiled; False: profiled; True: profiled and answered
        with its own profile (a triggered request)."""
        if self.trigger:
            if not self._triggered(query, header):
                return None
            return self.respond_with_profile
        if self.always:
            return False
        if self.fraction is not None:
            return False if random.random() < self.fraction else None
        assert self.predicate is not None
        try:
            chosen = self.predicate(request_view)
        except Exception:  # noqa: BLE001 - a profiler never fails a request
            self.predicate_errors += 1
            return None
        return False if chosen else None

    # -- one request ----------------------------------------------------------

    def begin(
        self,
        method: str,
        path: str,
        wants_profile: bool,
        labels: Optional[Dict[str, str]] = None,
    ) -> RequestInfo:
        """A request begins (or, with ``labels``, a block of samprof.profiled,
        whose labels replace route and method)."""
        self._ensure_flusher()
        request = RequestInfo(method, path, wants_profile)
        self.backend.begin(request)
        if labels is None:
            labels = {"route": request.route, "method": method}
        block = _labels(**labels, **request.extra_labels)
        block.__enter__()
        request.labels.append(block)
        request.token = _current.set(request)
        return request

    def end(self, request: RequestInfo) -> Optional[bytes]:
        try:
            _current.reset(request.token)
        except ValueError:  # ended in another context than it began
            _current.set(None)
        for block in reversed(request.labels):
            block.__exit__(None, None, None)
        request.labels.clear()
        return self.backend.end(request)

    # -- files --------------------------------------------------------------

    def _ensure_flusher(self) -> None:
        if self.files is None or self._flusher_pid == os.getpid():
            return
        with self._flusher_lock:
            if self._flusher_pid == os.getpid():
                return
            self._flusher_pid = os.getpid()
            self._stop_flusher = threading.Event()
            thread = threading.Thread(target=self._flush_every, name="samprof-flush", daemon=True)
            thread.start()
            # After the profilers' own exit handler is registered, so that
            # this one runs first (atexit runs the last registered first),
            # while the profile still runs.
            import samprof._profiler  # noqa: F401

            atexit.register(self._at_exit, os.getpid())
            _chain_sigterm(self)

    def _flush_every(self) -> None:
        while not self._stop_flusher.wait(self.flush_interval):
            self.flush()

    def flush(self) -> Optional[str]:
        """Write what the backend collected since the last flush to a new
        file; its path, or None when there was nothing."""
        if self.files is None:
            return None
        data = self.backend.collect()
        return self._write(data)

    def _write(self, data: Optional[bytes]) -> Optional[str]:
        if data is None or self.files is None:
            return None
        try:
            return self.files.write(data)
        except OSError:
            return None

    def shutdown(self) -> None:
        """This process is ending: write what the backend has left, and
        profile no more requests."""
        self._at_exit(os.getpid())

    def _at_exit(self, pid: int) -> None:
        if pid != os.getpid() or self._closed_pid == pid:
            return
        self._closed_pid = pid
        self._stop_flusher.set()
        self._write(self.backend.close())


# What runs before a SIGTERM ends the process (on_sigterm).
_sigterm_callbacks: List[Callable[[], None]] = []


def on_sigterm(callback: Callable[[], None]) -> None:
    """Run callback (it writes or sends a last profile) before SIGTERM ends
    the process, if SIGTERM would kill it outright (its default action);
    then the process dies of the signal as it would have. A program or
    server with a SIGTERM handler of its own (gunicorn's workers) exits
    through atexit anyway, and is left alone. Called in the main thread
    only (elsewhere, nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        current = signal.getsignal(signal.SIGTERM)
    except ValueError:
        return
    if current is _sigterm:
        _sigterm_callbacks.append(callback)
    elif current is signal.SIG_DFL:
        _sigterm_callbacks.append(callback)
        signal.signal(signal.SIGTERM, _sigterm)


def _sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for callback in list(_sigterm_callbacks):
        try:
            callback()
        except Exception:  # noqa: BLE001 - the process must still end
            pass
    os.kill(os.getpid(), signal.SIGTERM)


def _chain_sigterm(profiling: Profiling) -> None:
    """The files of profiling are written before SIGTERM ends the process."""
    on_sigterm(lambda: profiling._at_exit(os.getpid()))


def profile_response(data: bytes, accept: str, suffix: str) -> tuple:
    """(content type, headers, body) for a triggered request's answer: the
    profile's file (pprof, or pstats for the cProfile backend), or, for a
    browser, a page with its top functions and the file to save."""
    filename = "profile" + suffix
    if "text/html" not in accept:
        return (
            "application/octet-stream",
            [("Content-Disposition", f'attachment; filename="{filename}"')],
            data,
        )
    import base64
    import html

    from samprof.report import pstats_top, top

    if suffix == ".prof":
        import marshal

        text = pstats_top(marshal.loads(data), n=40)
        reader = "python -m pstats profile.prof"
    else:
        text = top(pprof.read(data), n=40)
        reader = "go tool pprof -http=: profile.pb.gz"
    link = base64.b64encode(data).decode()
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>samprof profile</title>"
        f"</head><body><p><a download='{filename}' "
        f"href='data:application/octet-stream;base64,{link}'>{filename}</a> "
        f"({html.escape(reader)})</p><pre>"
        f"{html.escape(text)}</pre></body></html>"
    )
    return "text/html; charset=utf-8", [], page.encode()


# The last middleware made with a profile_dir: where samprof.profiled
# writes unless told otherwise.
_last_with_files: Optional[Profiling] = None
_default_for_profiled: Optional[Profiling] = None
_default_lock = threading.Lock()
# Set inside a profiled block: nested and recursive calls run as they are.
_in_profiled: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "samprof.profiled", default=False
)


def _profiling_for_profiled(middleware: Any) -> Optional[Profiling]:
    global _default_for_profiled
    if middleware is not None:
        return getattr(middleware, "profiling", middleware)
    if _last_with_files is not None:
        return _last_with_files
    directory = os.environ.get("SAMPROF_PROFILE_DIR")
    if not directory:
        return None
    with _default_lock:
        if _default_for_profiled is None:
            # Only profiled blocks: no request chooses it.
            _default_for_profiled = Profiling(when=lambda request: False, profile_dir=directory)
    return _default_for_profiled


class profiled:
    """Profile a function's calls, or a block, outside any web request::

        @samprof.profiled
        def reindex(): ...

        @samprof.profiled(name="nightly")
        async def nightly(): ...

        with samprof.profiled("report"):
            build_report()

    Each outermost call runs as a profiled request would, its samples
    labelled ``function=NAME`` (the function's qualified name, or the name
    given); calls it makes to itself or to other profiled functions are
    part of it, not profiled again. The results go where the middleware's
    do: the files of ``middleware`` (a ProfilerMiddleware), else of the
    last one made with a ``profile_dir`` in this process, else of
    ``$SAMPROF_PROFILE_DIR``; with none of them, calls run unprofiled.
    An ``async def`` function is profiled across its awaits.
    """

    def __init__(
        self, target: Any = None, *, name: Optional[str] = None, middleware: Any = None
    ) -> None:
        self._function: Optional[Callable[..., Any]] = None
        if callable(target):
            self._function = target
            name = name or getattr(target, "__qualname__", None) or repr(target)
            functools.update_wrapper(self, target)  # type: ignore[arg-type]
        elif target is not None:
            name = str(target)
        self.name = name
        self._middleware = middleware
        # The with-blocks of this object that run, innermost last.
        self._blocks: List[Any] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fn = self._function
        if fn is None:  # @profiled(...) given its function
            if len(args) != 1 or kwargs or not callable(args[0]):
                raise TypeError("samprof.profiled(...) decorates one function")
            return profiled(args[0], name=self.name, middleware=self._middleware)
        if inspect.iscoroutinefunction(fn):
            return self._call_async(fn, *args, **kwargs)
        block = self._begin()
        try:
            return fn(*args, **kwargs)
        finally:
            self._end(block)

    async def _call_async(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        block = self._begin()
        try:
            return await fn(*args, **kwargs)
        finally:
            self._end(block)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    def _begin(self) -> Any:
        if _in_profiled.get():
            return None  # inside a profiled call: part of it
        profiling = _profiling_for_profiled(self._middleware)
        if profiling is None:
            return None
        token = _in_profiled.set(True)
        request = profiling.begin("", "", False, labels={"function": str(self.name)})
        return profiling, request, token

    @staticmethod
    def _end(block: Any) -> None:
        if block is None:
            return
        profiling, request, token = block
        try:
            profiling.end(request)
        finally:
            _in_profiled.reset(token)

    def __enter__(self) -> "profiled":
        if not self.name:
            raise TypeError("samprof.profiled as a context manager needs a name")
        self._blocks.append(self._begin())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._end(self._blocks.pop())


class _DebugGated:
    """What the WSGI and ASGI DebugMiddleware share: the application and the
    samprof.debug.Gate its options make (imported only when one is made)."""

    def __init__(self, app: Callable[..., Any], **options: Any) -> None:
        from samprof.debug import Gate

        self.app = app
        self.gate = Gate(**options)

    @property
    def enabled(self) -> bool:
        """Whether triggered requests are debugged (see Gate)."""
        return self.gate.enabled
