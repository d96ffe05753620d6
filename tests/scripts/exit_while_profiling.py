"""A process that leaves while samprof profiles and daemon threads are busy.

Usage:
  exit_while_profiling.py run KIND PROFILER SEED
      Sets up (busy daemon threads, then PROFILER: cpu, wall or none),
      works a few milliseconds, and leaves by KIND: sys.exit, exception,
      os._exit, SIGTERM or SIGINT. The exit status is what the test checks.
  exit_while_profiling.py many JOBS_JSON PARALLEL
      The same, many times, cheaply: a fork server. It imports the standard
      library once, then forks a child per job [kind, profiler, seed]
      (PARALLEL at a time) that runs exactly what `run` runs, so each child
      leaves through the interpreter's normal exit path (the exception
      escapes to the top of this script). samprof itself is imported in
      each child, never in the server, so every child starts from a fresh
      samprof as a new process would. Prints one JSON line with each child's exit status and
      stderr; a child still alive after CHILD_TIMEOUT is a hang (reported
      with a gdb backtrace when gdb is installed, then killed), after which
      no more jobs start: one hang is enough to fail, and waiting out
      hundreds would take hours.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

CHILD_TIMEOUT = 20.0
KINDS = ("sys.exit", "exception", "os._exit", "SIGTERM", "SIGINT")


def spinner() -> None:
    n = 0
    while True:
        for i in range(1000):
            n += i


def hasher() -> None:
    # hashlib releases the GIL for large buffers: a thread busy in C.
    data = b"x" * (1 << 20)
    while True:
        hashlib.sha256(data).digest()


def sleeper() -> None:
    while True:
        time.sleep(0.001)


def doomed(kind: str, profiler: str, seed: int) -> None:
    """Never returns normally: leaves the process by `kind`."""
    rng = random.Random(seed)
    # SIGINT's disposition is inherited: a shell's background job starts
    # with it ignored, and Python then installs no KeyboardInterrupt
    # handler. What this checks needs Python's default, so set it here.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # Thread.start() waits for the new thread to run, and a busy thread
    # holds the GIL for a whole switch interval: a shorter interval keeps
    # each run short without making the threads any less busy.
    sys.setswitchinterval(0.0001)
    for target in (sleeper, hasher, spinner):
        threading.Thread(target=target, daemon=True).start()
    if profiler != "none":
        import samprof

        cls = samprof.CPUProfiler if profiler == "cpu" else samprof.WallProfiler
        cls(hz=1000).start()
    # Leave at a different point of the sampling cycle each time.
    end = time.monotonic() + rng.uniform(0.0005, 0.006)
    n = 0
    while time.monotonic() < end:
        n += 1
    if kind == "sys.exit":
        sys.exit(3)
    if kind == "exception":
        raise RuntimeError("unhandled on purpose")
    if kind == "os._exit":
        os._exit(4)
    sig = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}[kind]
    os.kill(os.getpid(), sig)
    # The signal ends the process (SIGTERM) or raises KeyboardInterrupt
    # here (SIGINT); spinning on means it did neither.
    end = time.monotonic() + 20
    while time.monotonic() < end:
        n += 1
    os._exit(99)


def backtrace(pid: int) -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(gdb not installed)"
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    try:
        r = subprocess.run(
            [gdb, "-batch", "-p", str(pid), "-ex", "bt 25", "-ex", "thread apply all bt 12"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(gdb failed: {e})"
    return "\n".join(line for line in r.stdout.splitlines() if line.startswith(("#", "Thread")))[
        :8000
    ]


def many(jobs: list, parallel: int) -> None:
    results = [None] * len(jobs)
    running = {}  # pid -> (index, stderr path, start time)
    tmpdir = tempfile.mkdtemp(prefix="samprof-exit-")
    next_job = 0
    hung = False
    while (next_job < len(jobs) and not hung) or running:
        while next_job < len(jobs) and len(running) < parallel and not hung:
            kind, profiler, seed = jobs[next_job]
            err_path = os.path.join(tmpdir, f"{next_job}.err")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd, 2)
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                # Whatever happens now is the child's own exit: an exception
                # escapes to the top of this script, as in a script of its
                # own.
                doomed(kind, profiler, seed)
                os._exit(98)  # not reached
            running[pid] = (next_job, err_path, time.monotonic())
            next_job += 1
        for pid, (index, err_path, started) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            hang = None
            if not done and time.monotonic() - started > CHILD_TIMEOUT:
                hang = backtrace(pid)
                hung = True
                os.kill(pid, signal.SIGKILL)
                done, status = os.waitpid(pid, 0)
            if not done:
                continue
            del running[pid]
            with open(err_path, errors="replace") as f:
                stderr = f.read()
            results[index] = {
                "job": jobs[index],
                "status": os.waitstatus_to_exitcode(status),
                "stderr": stderr[-3000:],
                "hang": hang,
            }
        time.sleep(0.001)
    shutil.rmtree(tmpdir, ignore_errors=True)
    print(json.dumps([r for r in results if r is not None]), flush=True)


def main() -> None:
    if sys.argv[1] == "run":
        doomed(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        # What samprof imports, so that children import only samprof.
        import contextvars  # noqa: F401
        import dataclasses  # noqa: F401
        import gc  # noqa: F401
        import gzip  # noqa: F401
        import numbers  # noqa: F401
        import typing  # noqa: F401

        assert "samprof" not in sys.modules
        with open(sys.argv[2]) as f:
            jobs = json.load(f)
        many(jobs, int(sys.argv[3]))


if __name__ == "__main__":
    main()
