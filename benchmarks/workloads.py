"""The programs the benchmarks profile.

Each workload does a fixed amount of work (about 2 s on the reference
machine at ``scale=1``) split into *call groups*: module-level functions named
``group_*`` that never call one another. The workload times every call of a
group with ``time.thread_time`` in the thread that makes it, so it knows how
much CPU each group really used; a profiler is accurate when the shares it
gives these functions match. Work between groups (I/O waits, thread start and
join) belongs to no group.

A workload object has ``prepare()`` (set-up that must not be measured, such as
starting idle threads), ``run() -> {group name: CPU seconds}`` (the measured
part) and ``close()``.

Groups delete their big locals before returning. CPython releases a
returning frame's locals only after the frame has left the thread's frame
chain, so a sampling profiler charges that deallocation to the caller, while
the group's own clock (which stops after the call) counts it; freeing them
inside the group keeps the two measuring the same thing.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable, Dict, List, Optional

# --------------------------------------------------------------------------
# Call-heavy: tiny functions and deep call chains, the worst case for
# profilers that hook every call.


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Counter:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1

    def get(self) -> int:
        return self.value


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x: int, y: int) -> None:
        self.x = x
        self.y = y

    def add(self, other: "Vec") -> "Vec":
        return Vec(self.x + other.x, self.y + other.y)

    def norm2(self) -> int:
        return self.x * self.x + self.y * self.y


def chain(depth: int, x: int) -> int:
    """A call chain ``depth`` frames deep with almost no work per frame."""
    if depth == 0:
        return x + 1
    return chain(depth - 1, x) + 1


def group_fib() -> int:
    return fib(17)


def group_methods() -> int:
    counter = Counter()
    v = Vec(0, 0)
    step = Vec(1, 2)
    for _ in range(1500):
        counter.inc()
        v = v.add(step)
        counter.get()
    return counter.get() + v.norm2()


def group_chain() -> int:
    total = 0
    for i in range(150):
        total += chain(60, i)
    return total


# --------------------------------------------------------------------------
# Mixed: allocation, string work, dict and list operations, calls.


class Record:
    def __init__(self, key: str, value: int) -> None:
        self.key = key
        self.value = value
        self.tags = [key[:2], str(value % 7)]


def group_alloc() -> int:
    records = [Record(f"k{i}", i) for i in range(800)]
    pairs = [(r.key, r.value, r.tags) for r in records]
    index = {p[0]: p for p in pairs}
    n = len(index)
    del records, pairs, index  # see the module docstring
    return n


def group_strings() -> int:
    words = [f"word{i:04d}" for i in range(400)]
    text = " ".join(words)
    upper = text.upper().replace("WORD", "w")
    parts = upper.split()
    joined = ",".join(p[::-1] for p in parts)
    n = len(joined) + sum(1 for p in parts if p.endswith("7"))
    del words, text, upper, parts, joined  # see the module docstring
    return n


def group_containers() -> int:
    d = {i: i * i for i in range(1200)}
    keys = sorted(d, key=lambda k: (k * 7919) % 1201)
    hits = sum(1 for k in keys if k in d and d[k] % 3 == 0)
    s = set(keys[::2]) & set(keys[::3])
    lst = list(d.values())
    lst.reverse()
    n = hits + len(s) + lst[0]
    del d, keys, s, lst  # see the module docstring
    return n


# Alloc-heavy: what a heap profiler's hooks see most, one thread. Every
# allocation is made and freed in the group: small objects (pymalloc), list
# and dict buffers (the MEM domain) and buffers of a few KiB.


def group_objects() -> int:
    records = [Record(f"r{i}", i) for i in range(400)]
    n = sum(r.value for r in records)
    del records
    return n


def group_buffers() -> int:
    chunks = [bytes(512 + 97 * (i % 40)) for i in range(300)]
    arrays = [bytearray(2048 + 256 * (i % 16)) for i in range(100)]
    n = sum(len(c) for c in chunks) + sum(len(a) for a in arrays)
    del chunks, arrays
    return n


def group_growth() -> int:
    out: List[object] = []
    for i in range(1500):
        out.append((i, str(i)))
    table = {}
    for key, text in out:
        table[text] = key
    n = len(table)
    del out, table
    return n


def _scale(x: int, factor: int = 3, offset: int = 1) -> int:
    return x * factor + offset


def _clamp(x: int, lo: int = 0, hi: int = 1000) -> int:
    return lo if x < lo else hi if x > hi else x


def group_calls() -> int:
    total = 0
    for i in range(1200):
        total += _clamp(_scale(i, factor=2), hi=2000)
    return total


# --------------------------------------------------------------------------
# Threads with I/O waits: client threads do some CPU work, send a request
# over a socketpair, block on the reply, and sleep a little; server threads
# block on recv, do some CPU work and reply.


def _checksum(data: bytes) -> int:
    h = 0
    for b in data:
        h = (h * 31 + b) & 0xFFFFFFFF
    return h


def group_crunch(seed: int) -> bytes:
    values = [(seed * 2654435761 + i * 40503) & 0xFFFF for i in range(600)]
    values.sort()
    payload = bytes(v & 0xFF for v in values[:256])
    del values  # see the module docstring
    return payload


def group_serve(request: bytes) -> bytes:
    return _checksum(request * 4).to_bytes(4, "little")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("peer closed the socket")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------
# Measurement.


class _Timings:
    """CPU seconds per group, summed over the threads that ran them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cpu: Dict[str, float] = {}

    def add(self, local: Dict[str, float]) -> None:
        with self.lock:
            for name, seconds in local.items():
                self.cpu[name] = self.cpu.get(name, 0.0) + seconds


def _run_groups(plan: List[Callable[[], object]], rounds: int) -> Dict[str, float]:
    """Call every function of ``plan`` once per round, timing each call with
    the calling thread's CPU clock."""
    cpu = {f.__name__: 0.0 for f in plan}
    clock = time.thread_time
    for _ in range(rounds):
        for f in plan:
            t0 = clock()
            f()
            cpu[f.__name__] += clock() - t0
    return cpu


class Workload:
    """Base class; see the module docstring."""

    name = ""
    description = ""
    groups: List[str] = []

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def prepare(self) -> None:
        pass

    def run(self) -> Dict[str, float]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def rounds(self, full: int) -> int:
        return max(1, round(full * self.scale))


class CallHeavy(Workload):
    name = "call-heavy"
    description = "recursive fib, small method calls, 60-deep call chains (one thread)"
    groups = ["group_fib", "group_methods", "group_chain"]
    plan = [group_fib, group_fib, group_methods, group_chain]

    def run(self) -> Dict[str, float]:
        return _run_groups(self.plan, self.rounds(1100))


class Mixed(Workload):
    name = "mixed"
    description = "allocation, string work, dict/list/set operations, calls (one thread)"
    groups = ["group_alloc", "group_strings", "group_containers", "group_calls"]
    plan = [group_alloc, group_strings, group_containers, group_calls]

    def run(self) -> Dict[str, float]:
        return _run_groups(self.plan, self.rounds(1000))


def _no_heap_trimming() -> None:
    """mallopt(M_TRIM_THRESHOLD, 1 GiB), where the C library is glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return
    libc = ctypes.CDLL(name)
    if hasattr(libc, "mallopt"):
        m_trim_threshold = -1
        libc.mallopt(m_trim_threshold, 1 << 30)


class AllocHeavy(Workload):
    name = "alloc-heavy"
    description = (
        "objects, bytes and bytearrays of 0.5-6 KiB, growing lists and dicts, all freed "
        "(one thread)"
    )
    groups = ["group_objects", "group_buffers", "group_growth"]
    plan = [group_objects, group_buffers, group_growth]

    def prepare(self) -> None:
        # The buffers above 512 bytes come from glibc's malloc, which gives
        # the top of its heap back to the kernel whenever a round frees it
        # and faults it in again in the next: a quarter of this workload's
        # time on the reference machine (1.01 s, 0.76 s with trimming off).
        # Whether a profiler's own long-lived allocations happen to pin the
        # heap top decided its ratio (one run measured a heap profiler 20%
        # "faster" than no profiler). Trimming is turned off in both runs
        # of a pair, so the ratio is the profiler's.
        _no_heap_trimming()

    def run(self) -> Dict[str, float]:
        return _run_groups(self.plan, self.rounds(1400))


class ThreadedIO(Workload):
    name = "threaded-io"
    description = (
        "4 client threads (CPU work, request over a socketpair, sleep 0.5 ms) "
        "and 4 server threads (recv, CPU work, reply)"
    )
    groups = ["group_crunch", "group_serve"]
    n_pairs = 4

    def run(self) -> Dict[str, float]:
        timings = _Timings()
        requests = self.rounds(1350)
        errors: List[BaseException] = []

        def client(sock: socket.socket, seed: int) -> None:
            cpu = {"group_crunch": 0.0}
            try:
                for i in range(requests):
                    t0 = time.thread_time()
                    payload = group_crunch(seed + i)
                    cpu["group_crunch"] += time.thread_time() - t0
                    sock.sendall(payload)
                    _recv_exactly(sock, 4)
                    time.sleep(0.0005)
            except BaseException as e:  # reported by run()
                errors.append(e)
            finally:
                sock.close()
                timings.add(cpu)

        def server(sock: socket.socket) -> None:
            cpu = {"group_serve": 0.0}
            try:
                for _ in range(requests):
                    request = _recv_exactly(sock, 256)
                    t0 = time.thread_time()
                    reply = group_serve(request)
                    cpu["group_serve"] += time.thread_time() - t0
                    sock.sendall(reply)
            except BaseException as e:  # reported by run()
                errors.append(e)
            finally:
                sock.close()
                timings.add(cpu)

        threads = []
        for k in range(self.n_pairs):
            a, b = socket.socketpair()
            threads.append(threading.Thread(target=client, args=(a, k * 1000), name=f"client{k}"))
            threads.append(threading.Thread(target=server, args=(b,), name=f"server{k}"))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"worker thread failed: {errors[0]!r}")
        return timings.cpu


class IdleThreads(Workload):
    """The mixed workload in the main thread beside N threads blocked on a
    threading.Event for the whole run. The idle threads start in prepare(),
    before the profiler, so the measured part is the busy thread's work."""

    name = "idle-threads"
    groups = Mixed.groups

    def __init__(self, scale: float, n_idle: int) -> None:
        super().__init__(scale)
        self.n_idle = n_idle
        self.name = f"idle-{n_idle}"
        self.description = f"mixed work in one thread beside {n_idle} threads blocked on an Event"
        self._event = threading.Event()
        self._threads: List[threading.Thread] = []

    def prepare(self) -> None:
        started = threading.Barrier(self.n_idle + 1) if self.n_idle else None

        def idle() -> None:
            assert started is not None
            started.wait()
            self._event.wait()

        for i in range(self.n_idle):
            t = threading.Thread(target=idle, name=f"idle{i}", daemon=True)
            t.start()
            self._threads.append(t)
        if started is not None:
            started.wait()

    def run(self) -> Dict[str, float]:
        return _run_groups(Mixed.plan, self.rounds(1000))

    def close(self) -> None:
        self._event.set()
        for t in self._threads:
            t.join()


# --------------------------------------------------------------------------
# Cost per sample: a recursion of a given depth that spins at its leaf.


def spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def descend(depth: int, n: int) -> int:
    if depth <= 1:
        return spin(n)
    return descend(depth - 1, n)


class DeepSpin(Workload):
    """``descend`` ``depth`` frames deep, then a loop at the leaf: every
    sample walks ``depth`` frames (plus the few of the harness)."""

    groups = ["spin"]

    def __init__(self, scale: float, depth: int) -> None:
        super().__init__(scale)
        self.depth = depth
        self.name = f"depth-{depth}"
        self.description = f"a loop at the bottom of a {depth}-deep recursion"

    def run(self) -> Dict[str, float]:
        t0 = time.thread_time()
        descend(self.depth, max(1, round(40_000_000 * self.scale)))
        return {"spin": time.thread_time() - t0}


# --------------------------------------------------------------------------
# Memory: the call-heavy and mixed groups in turn for a fixed wall time.


class Soak(Workload):
    groups = CallHeavy.groups + Mixed.groups

    def __init__(self, scale: float, seconds: float) -> None:
        super().__init__(scale)
        self.seconds = seconds
        self.name = f"soak-{seconds:g}s"
        self.description = f"call-heavy and mixed groups in turn for {seconds:g} s"

    def run(self) -> Dict[str, float]:
        deadline = time.perf_counter() + self.seconds
        cpu: Dict[str, float] = {}
        while time.perf_counter() < deadline:
            for name, seconds in _run_groups(CallHeavy.plan + Mixed.plan, 5).items():
                cpu[name] = cpu.get(name, 0.0) + seconds
        return cpu


CORE = ["call-heavy", "mixed", "threaded-io"]
IDLE_COUNTS = [0, 10, 100, 500, 2000]
DEPTHS = [10, 50, 200]


def make(name: str, scale: float, seconds: Optional[float] = None) -> Workload:
    """The workload called ``name`` (``call-heavy``, ``mixed``,
    ``threaded-io``, ``alloc-heavy``, ``idle-N``, ``depth-N``, ``soak``)."""
    if name == "call-heavy":
        return CallHeavy(scale)
    if name == "mixed":
        return Mixed(scale)
    if name == "threaded-io":
        return ThreadedIO(scale)
    if name == "alloc-heavy":
        return AllocHeavy(scale)
    if name.startswith("idle-"):
        return IdleThreads(scale, int(name[len("idle-") :]))
    if name.startswith("depth-"):
        return DeepSpin(scale, int(name[len("depth-") :]))
    if name == "soak":
        return Soak(scale, seconds if seconds is not None else 60.0)
    raise ValueError(f"unknown workload {name!r}")
