"""The profilers the benchmarks compare, and how each one runs a workload.

A profiler is either *in-process* (the measurement subprocess starts it
around the workload through an :class:`Adapter`) or *out-of-process* (the
harness runs the measurement subprocess under the profiler's own command,
which samples it from outside). Every profiler can also say how much of the
profile it attributes to each call group of the workload, which is how
accuracy is measured; see :func:`group_values`.

This module is imported by the measurement subprocess, so it imports no
profiler at module level: each adapter imports its own when it starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

IN_PROCESS = "in-process"
OUT_OF_PROCESS = "out-of-process"
NONE = "none"


@dataclass(frozen=True)
class Spec:
    """One profiler configuration.

    ``clock`` is what the profiler measures (``cpu``, ``wall``, ``calls``
    for deterministic profilers, or ``heap`` for memory profilers, which
    are measured on the heap workloads only); ``rate_hz`` its sampling rate, for the
    overhead-vs-rate plot; ``family`` groups configurations of one tool (for
    the plot and for availability); ``quick`` puts it in ``--quick`` runs.
    """

    id: str
    label: str
    family: str
    kind: str
    clock: str = "cpu"
    rate_hz: Optional[int] = None
    quick: bool = False
    params: Dict[str, Any] = field(default_factory=dict)


SPECS: List[Spec] = [
    Spec("none", "no profiler (noise control)", "none", NONE, clock="", quick=True),
    Spec("samprof-cpu-100", "samprof CPU 100 Hz", "samprof-cpu", IN_PROCESS, "cpu", 100, True),
    Spec("samprof-cpu-1k", "samprof CPU 1 kHz", "samprof-cpu", IN_PROCESS, "cpu", 1000, True),
    Spec("samprof-cpu-10k", "samprof CPU 10 kHz", "samprof-cpu", IN_PROCESS, "cpu", 10000, True),
    Spec(
        "samprof-cpu-10k-perf",
        "samprof CPU 10 kHz, perf engine",
        "samprof-cpu",
        IN_PROCESS,
        "cpu",
        10000,
        True,
        {"engine": "perf"},
    ),
    Spec("samprof-wall-100", "samprof wall 100 Hz", "samprof-wall", IN_PROCESS, "wall", 100, True),
    Spec("samprof-wall-1k", "samprof wall 1 kHz", "samprof-wall", IN_PROCESS, "wall", 1000, True),
    Spec("cprofile", "cProfile", "cProfile", IN_PROCESS, "calls", None, True),
    Spec("yappi-cpu", "yappi (cpu clock)", "yappi", IN_PROCESS, "calls", None),
    Spec("yappi-wall", "yappi (wall clock)", "yappi", IN_PROCESS, "calls", None),
    Spec(
        "pyinstrument-1ms",
        "pyinstrument (interval 1 ms, default)",
        "pyinstrument",
        IN_PROCESS,
        "wall",
        1000,
        params={"interval": 0.001},
    ),
    Spec(
        "pyinstrument-10ms",
        "pyinstrument (interval 10 ms)",
        "pyinstrument",
        IN_PROCESS,
        "wall",
        100,
        params={"interval": 0.01},
    ),
    Spec(
        "py-spy-100",
        "py-spy record (100 Hz, default)",
        "py-spy",
        OUT_OF_PROCESS,
        "wall",
        100,
        params={"rate": 100},
    ),
    Spec(
        "py-spy-100-nonblocking",
        "py-spy record --nonblocking (100 Hz)",
        "py-spy nonblocking",
        OUT_OF_PROCESS,
        "wall",
        100,
        params={"rate": 100, "nonblocking": True},
    ),
    Spec(
        "py-spy-1k",
        "py-spy record --rate 1000",
        "py-spy",
        OUT_OF_PROCESS,
        "wall",
        1000,
        params={"rate": 1000},
    ),
    Spec(
        "austin-100",
        "austin -i 10ms (100 Hz)",
        "austin",
        OUT_OF_PROCESS,
        "wall",
        100,
        params={"interval_us": 10000},
    ),
    Spec(
        "austin-1k",
        "austin -i 1ms (1 kHz)",
        "austin",
        OUT_OF_PROCESS,
        "wall",
        1000,
        params={"interval_us": 1000},
    ),
    Spec(
        "samprof-heap-512k",
        "samprof heap, rate 512 KiB (default)",
        "samprof-heap",
        IN_PROCESS,
        "heap",
        quick=True,
        params={"rate": 512 * 1024},
    ),
    Spec(
        "samprof-heap-128k",
        "samprof heap, rate 128 KiB",
        "samprof-heap",
        IN_PROCESS,
        "heap",
        params={"rate": 128 * 1024},
    ),
    Spec(
        "hook-floor",
        "pass-through allocator hook (floor)",
        "hook-floor",
        IN_PROCESS,
        "heap",
    ),
    Spec(
        "tracemalloc-1",
        "tracemalloc, 1 frame",
        "tracemalloc",
        IN_PROCESS,
        "heap",
        params={"frames": 1},
    ),
    Spec(
        "tracemalloc-32",
        "tracemalloc, 32 frames",
        "tracemalloc",
        IN_PROCESS,
        "heap",
        params={"frames": 32},
    ),
    Spec("memray", "memray Tracker (every allocation)", "memray", IN_PROCESS, "heap"),
    Spec(
        "zprofile-cpu-100",
        "zprofile CPUProfiler (10 ms period)",
        "zprofile",
        IN_PROCESS,
        "cpu",
        100,
        params={"period_ms": 10},
    ),
]

BY_ID = {spec.id: spec for spec in SPECS}


# --------------------------------------------------------------------------
# Availability (asked by the harness, in the benchmark environment).


def tool_path(name: str) -> Optional[str]:
    """The executable ``name`` of the benchmark environment, else of PATH."""
    local = os.path.join(os.path.dirname(sys.executable), name)
    if os.access(local, os.X_OK):
        return local
    return shutil.which(name)


def _module_version(module: str, dist: str) -> str:
    __import__(module)
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "stdlib" if dist == "" else "unknown version"


def _tool_version(name: str) -> str:
    path = tool_path(name)
    if path is None:
        raise RuntimeError(f"{name}: executable not found")
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    text = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise RuntimeError(f"`{name} --version` exited {done.returncode}: {text}")
    return text.splitlines()[0] if text else "unknown version"


def probe(family: str) -> str:
    """Check that a profiler family can run here; return its version.

    Raises an exception whose text says why not.
    """
    if family == "none":
        return ""
    if family in ("samprof-cpu", "samprof-wall"):
        import samprof

        if family == "samprof-wall" and not hasattr(samprof, "WallProfiler"):
            raise RuntimeError("this samprof has no WallProfiler")
        return samprof.__version__
    if family == "samprof-heap":
        import samprof

        if not hasattr(samprof, "HeapProfiler"):
            raise RuntimeError("this samprof has no HeapProfiler")
        return samprof.__version__
    if family == "hook-floor":
        _hook_floor_library()
        return "benchmarks/hook_floor.c"
    if family == "tracemalloc":
        import platform

        __import__("tracemalloc")
        return f"stdlib (Python {platform.python_version()})"
    if family == "memray":
        return _module_version("memray", "memray")
    if family == "cProfile":
        import platform

        __import__("cProfile")
        return f"stdlib (Python {platform.python_version()})"
    if family == "yappi":
        return _module_version("yappi", "yappi")
    if family == "pyinstrument":
        return _module_version("pyinstrument", "pyinstrument")
    if family == "zprofile":
        return _module_version("zprofile.cpu_profiler", "zprofile")
    if family in ("py-spy", "py-spy nonblocking"):
        return _tool_version("py-spy")
    if family == "austin":
        return _tool_version("austin")
    raise ValueError(f"unknown profiler family {family!r}")


# --------------------------------------------------------------------------
# In-process adapters (run inside the measurement subprocess).


class Adapter:
    """Starts and stops one in-process profiler around the workload.

    ``stop()`` returns the profiler's result in its own form; after it,
    ``group_values(result, groups)`` gives the profile's weight for each
    call group and ``details()`` anything worth reporting about the run.
    """

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> Any:
        raise NotImplementedError

    def size(self, result: Any) -> Optional[int]:
        """Size in bytes of the profile the run produced, if it has one."""
        return None

    def group_values(self, result: Any, groups: List[str]) -> Optional[Dict[str, float]]:
        return None

    def details(self) -> Dict[str, Any]:
        return {}


class NoProfiler(Adapter):
    def start(self) -> None:
        pass

    def stop(self) -> Any:
        return None


class Samprof(Adapter):
    def __init__(self, mode: str, hz: int, engine: Optional[str]) -> None:
        self.mode = mode
        self.hz = hz
        self.engine = engine
        self.profiler: Any = None

    def start(self) -> None:
        import samprof

        if self.mode == "wall":
            self.profiler = samprof.WallProfiler(hz=self.hz)
        elif self.engine:
            self.profiler = samprof.CPUProfiler(hz=self.hz, engine=self.engine)
        else:
            self.profiler = samprof.CPUProfiler(hz=self.hz)
        self.profiler.start()

    def stop(self) -> Any:
        return self.profiler.stop()

    def size(self, result: Any) -> Optional[int]:
        return len(result)

    def group_values(self, result: Any, groups: List[str]) -> Optional[Dict[str, float]]:
        return pprof_group_values(result, groups)

    def details(self) -> Dict[str, Any]:
        import dataclasses

        stats = self.profiler.stats
        if stats is None:
            return {}
        return dataclasses.asdict(stats) if dataclasses.is_dataclass(stats) else dict(stats)


def pprof_group_values(data: bytes, groups: List[str]) -> Dict[str, float]:
    """Weight per call group in a pprof profile: the default sample type,
    summed over the samples whose stack holds the group's function."""
    from samprof.pprof import Profile

    profile = Profile.parse(data)
    index = profile.default_sample_index()
    wanted = set(groups)
    values = {g: 0.0 for g in groups}
    for sample in profile.samples:
        names = {frame.function.rsplit(".", 1)[-1] for frame in profile.stack_of(sample)}
        for name in names & wanted:
            values[name] += sample.values[index]
    return values


class SamprofHeap(Adapter):
    def __init__(self, rate: int) -> None:
        self.rate = rate

    def start(self) -> None:
        import samprof

        self.profiler = samprof.HeapProfiler(rate=self.rate)
        self.profiler.start()

    def stop(self) -> Any:
        return self.profiler.stop()

    def size(self, result: Any) -> Optional[int]:
        return len(result)

    def details(self) -> Dict[str, Any]:
        import dataclasses

        stats = self.profiler.stats
        return {} if stats is None else {"heap": dataclasses.asdict(stats)}


HOOK_FLOOR_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook_floor.c")


def _hook_floor_library() -> str:
    """hook_floor.c built for the running Python (once per interpreter,
    under build/benchmarks/); its path. Raises RuntimeError when it cannot
    be built."""
    import sysconfig

    from benchmarks.floor import find_compiler

    tag = sysconfig.get_config_var("SOABI") or sys.implementation.cache_tag
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = os.path.join(root, "build", "benchmarks", "hook-floor")
    path = os.path.join(out_dir, f"hook_floor.{tag}.so")
    if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(HOOK_FLOOR_SOURCE):
        return path
    os.makedirs(out_dir, exist_ok=True)
    compiler = find_compiler()
    include = sysconfig.get_paths()["include"]
    command = [compiler, "-O2", "-fPIC", "-shared", f"-I{include}", "-o", path, HOOK_FLOOR_SOURCE]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-500:]}")
    return path


class HookFloor(Adapter):
    """The floor under every allocator-hook profiler: hooks on the MEM and
    OBJ domains that do nothing but call the allocator below."""

    def start(self) -> None:
        import ctypes

        self.library = ctypes.PyDLL(_hook_floor_library())
        self.library.hook_floor_start()

    def stop(self) -> Any:
        self.library.hook_floor_stop()
        return None


class Tracemalloc(Adapter):
    """tracemalloc traces every allocation; the result is a snapshot, as a
    user would take one."""

    def __init__(self, frames: int) -> None:
        self.frames = frames

    def start(self) -> None:
        import tracemalloc

        tracemalloc.start(self.frames)

    def stop(self) -> Any:
        import tracemalloc

        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        return snapshot


class Memray(Adapter):
    """memray records every allocation to a capture file (Python frames
    only, its default)."""

    def start(self) -> None:
        import tempfile

        import memray

        self.dir = tempfile.mkdtemp(prefix="bench-memray-")
        self.path = os.path.join(self.dir, "capture.bin")
        self.tracker = memray.Tracker(self.path)
        self.tracker.__enter__()

    def stop(self) -> Any:
        self.tracker.__exit__(None, None, None)
        size = os.path.getsize(self.path)
        shutil.rmtree(self.dir, ignore_errors=True)
        return size

    def size(self, result: Any) -> Optional[int]:
        return result


class CProfile(Adapter):
    def start(self) -> None:
        import cProfile

        self.profiler = cProfile.Profile()
        self.profiler.enable()

    def stop(self) -> Any:
        self.profiler.disable()
        self.profiler.create_stats()
        return self.profiler.stats

    def group_values(self, result: Any, groups: List[str]) -> Optional[Dict[str, float]]:
        # stats: (file, line, name) -> (primitive calls, calls, own time,
        # cumulative time, callers); group functions never recurse, so the
        # cumulative time is the group's inclusive time.
        values = {g: 0.0 for g in groups}
        for (_file, _line, name), (_cc, _nc, _tt, ct, _callers) in result.items():
            if name in values:
                values[name] += ct
        return values


class Yappi(Adapter):
    def __init__(self, clock: str) -> None:
        self.clock = clock

    def start(self) -> None:
        import yappi

        yappi.set_clock_type(self.clock)
        yappi.start(builtins=False, profile_threads=True)

    def stop(self) -> Any:
        import yappi

        yappi.stop()
        return yappi.get_func_stats()

    def group_values(self, result: Any, groups: List[str]) -> Optional[Dict[str, float]]:
        values = {g: 0.0 for g in groups}
        for stat in result:
            name = stat.name.rsplit(".", 1)[-1]
            if name in values:
                values[name] += stat.ttot
        return values


class Pyinstrument(Adapter):
    def __init__(self, interval: float) -> None:
        self.interval = interval

    def start(self) -> None:
        from pyinstrument import Profiler

        self.profiler = Profiler(interval=self.interval, async_mode="disabled")
        self.profiler.start()

    def stop(self) -> Any:
        return self.profiler.stop()

    def group_values(self, result: Any, groups: List[str]) -> Optional[Dict[str, float]]:
        values = {g: 0.0 for g in groups}
        root = result.root_frame()
        stack = [root] if root is not None else []
        while stack:
            frame = stack.pop()
            name = (frame.function or "").rsplit(".", 1)[-1]
            if name in values:
                # Group functions never call one another: no need to look
                # below one.
                values[name] += frame.time
            else:
                stack.extend(frame.children)
        return values


class Zprofile(Adapter):
    """zprofile's CPU profiler profiles for a fixed duration in a thread of
    its own, with no way to stop it early: the harness passes the expected
    duration (twice the unprofiled time of the workload), and stop() waits
    for the rest of it."""

    def __init__(self, period_ms: int, duration_s: float) -> None:
        self.period_ms = period_ms
        self.duration_s = duration_s
        self.results: List[bytes] = []
        self.errors: List[BaseException] = []

    def start(self) -> None:
        from zprofile.cpu_profiler import CPUProfiler

        profiler = CPUProfiler(period_ms=self.period_ms)

        def run() -> None:
            try:
                self.results.append(profiler.profile(self.duration_s))
            except BaseException as e:  # re-raised by stop()
                self.errors.append(e)

        self.thread = threading.Thread(target=run, name="zprofile", daemon=True)
        self.thread.start()
        time.sleep(0.05)  # let it arm its timer before the workload starts

    def stop(self) -> Any:
        self.thread.join()
        if self.errors:
            raise self.errors[0]
        return self.results[0]

    def size(self, result: Any) -> Optional[int]:
        return len(result)

    def group_values(self, result: Any, groups: List[str]) -> Optional[Dict[str, float]]:
        return pprof_group_values(result, groups)

    def details(self) -> Dict[str, Any]:
        return {"profile_duration_s": self.duration_s}


def make_adapter(spec: Spec, duration_hint_s: float) -> Adapter:
    """The in-process adapter for ``spec`` (NoProfiler for out-of-process
    profilers, which run outside the measured process)."""
    if spec.kind != IN_PROCESS:
        return NoProfiler()
    if spec.family in ("samprof-cpu", "samprof-wall"):
        assert spec.rate_hz is not None
        return Samprof(spec.clock, spec.rate_hz, spec.params.get("engine"))
    if spec.family == "samprof-heap":
        return SamprofHeap(spec.params["rate"])
    if spec.family == "hook-floor":
        return HookFloor()
    if spec.family == "tracemalloc":
        return Tracemalloc(spec.params["frames"])
    if spec.family == "memray":
        return Memray()
    if spec.family == "cProfile":
        return CProfile()
    if spec.family == "yappi":
        return Yappi(spec.id.split("-", 1)[1])
    if spec.family == "pyinstrument":
        return Pyinstrument(spec.params["interval"])
    if spec.family == "zprofile":
        return Zprofile(spec.params["period_ms"], max(1.0, 2 * duration_hint_s))
    raise ValueError(f"no adapter for {spec.id}")


# --------------------------------------------------------------------------
# Out-of-process profilers (run by the harness).


def wrap_command(spec: Spec, command: List[str], output: str) -> List[str]:
    """The command line that runs ``command`` under the out-of-process
    profiler ``spec``, writing its profile to ``output``."""
    if spec.family in ("py-spy", "py-spy nonblocking"):
        pyspy = tool_path("py-spy") or "py-spy"
        wrapped = [pyspy, "record", "-o", output, "--format", "raw"]
        wrapped += ["--rate", str(spec.params["rate"])]
        if spec.params.get("nonblocking"):
            wrapped.append("--nonblocking")
        return wrapped + ["--"] + command
    if spec.family == "austin":
        austin = tool_path("austin") or "austin"
        return [austin, "-i", f"{spec.params['interval_us']}us", "-o", output] + command
    raise ValueError(f"{spec.id} is not an out-of-process profiler")


def collapsed_group_values(path: str, family: str, groups: List[str]) -> Dict[str, float]:
    """Weight per call group in a collapsed-stack file (py-spy ``raw``,
    austin's text format): ``frame;frame;... count`` per line."""
    values = {g: 0.0 for g in groups}
    wanted = set(groups)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            stack, _, count = line.rpartition(" ")
            try:
                weight = float(count)
            except ValueError:
                continue
            names = set()
            for frame in stack.split(";"):
                if family == "austin":
                    # path:function:line (P<pid> and T<thread> come first)
                    parts = frame.rsplit(":", 2)
                    name = parts[1] if len(parts) == 3 else ""
                else:
                    # function (path:line)
                    name = frame.split(" (", 1)[0]
                names.add(name.rsplit(".", 1)[-1])
            for name in names & wanted:
                values[name] += weight
    return values
