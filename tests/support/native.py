"""Native code for the tests: tests/native/*.c compiled once per process
into libraries, or with files of samprof's C core into driver programs;
and what the machine allows."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence

from support import NATIVE, SANITIZED, TESTS

# samprof's C sources, which the drivers link directly.
CORE = os.path.join(os.path.dirname(TESTS), "src", "samprof", "_c")

_native_cache: Dict[str, str] = {}


def native_library(source: str = "reliability.c") -> ctypes.CDLL:
    """tests/native/SOURCE compiled into a shared library (once per
    process) and loaded."""
    path = _native_cache.get(source)
    if path is None:
        out_dir = tempfile.mkdtemp(prefix="samprof-native-")
        path = os.path.join(out_dir, os.path.splitext(source)[0] + ".so")
        subprocess.run(
            [
                "gcc",
                "-O1",
                "-shared",
                "-fPIC",
                "-pthread",
                # Bound at load, as samprof is: the dynamic linker never
                # runs inside a signal handler.
                "-Wl,-z,now",
                "-o",
                path,
                os.path.join(NATIVE, source),
            ],
            check=True,
            timeout=300,
        )
        _native_cache[source] = path
    return ctypes.CDLL(path)


def python_library(source: str, out_dir: Path) -> Path:
    """tests/native/SOURCE, which calls this Python's C API, compiled into
    a shared library in out_dir (load it with ctypes.PyDLL)."""
    import sysconfig

    path = out_dir / (os.path.splitext(source)[0] + ".so")
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        ["gcc", "-O1", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{include}", "-o", str(path),
         os.path.join(NATIVE, source)],
        check=True,
        timeout=120,
    )  # fmt: skip
    return path


# src/samprof/_c's collect.c and everything it calls; none of it starts a
# sampler.
COLLECT_SOURCES = [
    "collect.c",
    "symbols.c",
    "frames.c",
    "ring.c",
    "profile.c",
    "pprof.c",
    "pb.c",
    "htab.c",
]


def build_driver(
    source: str, core_files: Sequence[str], out_dir: Path, extra: Sequence[str] = ()
) -> Path:
    """tests/native/SOURCE linked with these files of src/samprof/_c into a
    program in out_dir, warnings as errors; with ASan+UBSan in the
    sanitizer run. extra: more compiler and linker arguments."""
    binary = out_dir / os.path.splitext(source)[0]
    flags = ["-O1", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Werror", f"-I{CORE}"]
    if SANITIZED:
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
        flags += ["-fno-omit-frame-pointer"]
    sources = [os.path.join(NATIVE, source)] + [os.path.join(CORE, f) for f in core_files]
    subprocess.run(["gcc", *flags, "-o", str(binary), *sources, *extra], check=True, timeout=180)
    return binary


def run_driver(binary: Path, args: List[str], env: Dict[str, str]) -> subprocess.CompletedProcess:
    """Runs a driver from build_driver; fails the test (with its output)
    unless it exits 0 without a sanitizer report. The driver links its own
    sanitizer runtime when it has one: the interpreter's LD_PRELOAD is
    taken out of env."""
    env = dict(env)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"{binary.name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr
    return r


def libpython_flags() -> List[str]:
    """How to compile against and link this Python's libpython (shared, or
    static in LIBPL)."""
    import sysconfig

    cfg = sysconfig.get_config_var
    libdir = cfg("LIBDIR")
    if not os.path.exists(os.path.join(libdir, cfg("LDLIBRARY"))):
        libdir = cfg("LIBPL")
    flags = [f"-I{sysconfig.get_paths()['include']}", f"-L{libdir}"]
    flags += [f"-lpython{cfg('LDVERSION')}", f"-Wl,-rpath,{libdir}"]
    return flags + (cfg("LIBS") or "").split() + (cfg("SYSLIBS") or "").split()


def perf_available() -> bool:
    """Whether the perf-event engine can start here (perf_event_paranoid,
    seccomp and containers can forbid it)."""
    import samprof

    try:
        prof = samprof.CPUProfiler(hz=100, engine="perf")
        prof.start()
    except samprof.ProfilerError:
        return False
    prof.stop()
    return True


# A generated function's name (or file name) in tests/scripts/code_churn.py.
GENERATED = re.compile(r"gen_[a-z]_\d+_\d+")
