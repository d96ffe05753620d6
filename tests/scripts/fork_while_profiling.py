"""fork() while samprof profiles, with a busy thread running.

Usage: fork_while_profiling.py MODE SCENARIO PROFILE_OUT

MODE is cpu, wall, or none (samprof imported, nothing running). SCENARIO:
  fork  children made with os.fork() work, check the profiler in them, and
        leave with os._exit() (and, for some, with sys.exit(), which runs
        the interpreter's finalization in the child)
  pool  a multiprocessing Pool with the fork start method, one task per
        worker process, so workers are also forked from the pool's own
        handler thread
  exec  children that exec /bin/true (os.fork + os.execv, and subprocess)

In every forked child: profiling is off (_core.is_running() and the
parent's profiler object say so), and a new CPUProfiler starts, stops and
returns a valid profile. The parent keeps profiling through all of it and
afterwards burns CPU under the label phase=after-fork, so the test can see
samples taken after the forks. Prints one JSON line; exits non-zero with a
message on stderr when a check fails. Every wait has a timeout.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

from support.workloads import burn_cpu

import samprof
from samprof import _core
from samprof.pprof import Profile

# 3.12+ warns that forking a multi-threaded process may deadlock: that is
# the very situation under test.
warnings.simplefilter("ignore", DeprecationWarning)

CHILD_TIMEOUT = 15.0
PARENT_PROFILER = None


def check_in_child() -> str:
    """What is wrong with profiling in a forked child, or ""."""
    if _core.is_running():
        return "_core.is_running() is True in the child"
    if PARENT_PROFILER is not None and PARENT_PROFILER.running:
        return "the parent's profiler object says it is running in the child"
    prof = samprof.CPUProfiler(hz=1000)
    prof.start()
    burn_cpu(0.03)
    data = prof.stop()
    if data[:2] != b"\x1f\x8b":
        return "the child's profile is not gzipped"
    profile = Profile.parse(gzip.decompress(data))
    if not profile.samples:
        return f"the child's profile has no samples ({prof.stats})"
    if _core.is_running():
        return "_core.is_running() is True after stop() in the child"
    return ""


def pool_task(i: int) -> str:
    burn_cpu(0.01)
    return check_in_child()


def wait_child(pid: int, timeout: float = CHILD_TIMEOUT) -> int:
    """The child's wait status; kills it and fails when it hangs."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            fail(f"child {pid} hung: no exit after {timeout}s")
        time.sleep(0.005)


def fail(message: str) -> None:
    print(f"FAIL: {message}", file=sys.stderr, flush=True)
    os._exit(3)


def child_main(use_sys_exit: bool) -> None:
    """Runs in a forked child; never returns."""
    try:
        burn_cpu(0.01)
        problem = check_in_child()
    except BaseException as e:  # the child must not unwind into the parent's code
        problem = f"{type(e).__name__}: {e}"
    if problem:
        print(f"child: {problem}", file=sys.stderr, flush=True)
    code = 1 if problem else 0
    if use_sys_exit:
        # Leaves through the interpreter's normal exit: atexit handlers,
        # thread shutdown, finalization. SystemExit escapes to the top.
        sys.stderr.flush()
        raise SystemExit(code)
    os._exit(code)


def scenario_fork() -> dict:
    results = []
    for i in range(6):
        pid = os.fork()
        if pid == 0:
            child_main(use_sys_exit=(i % 2 == 1))
        status = wait_child(pid)
        results.append(os.waitstatus_to_exitcode(status))
        burn_cpu(0.005)
    if any(results):
        fail(f"forked children failed: exit statuses {results}")
    return {"children": len(results)}


def scenario_pool() -> dict:
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(processes=2, maxtasksperchild=1)
    try:
        problems = pool.map_async(pool_task, range(4)).get(timeout=CHILD_TIMEOUT)
    except multiprocessing.TimeoutError:
        pool.terminate()
        fail("the fork Pool did not finish its tasks")
    pool.close()
    # join() has no timeout: do it in a thread and give up after a while.
    joiner = threading.Thread(target=pool.join, daemon=True)
    joiner.start()
    joiner.join(CHILD_TIMEOUT)
    if joiner.is_alive():
        pool.terminate()
        fail("the fork Pool did not shut down")
    bad = [p for p in problems if p]
    if bad:
        fail(f"pool workers: {bad}")
    return {"tasks": len(problems)}


def scenario_exec() -> dict:
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
    statuses = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            try:
                os.execv(true, [true])
            finally:
                os._exit(127)
        statuses.append(os.waitstatus_to_exitcode(wait_child(pid)))
    for _ in range(3):
        statuses.append(subprocess.run([true], timeout=CHILD_TIMEOUT).returncode)
    if any(statuses):
        fail(f"exec'd children failed: exit statuses {statuses}")
    return {"children": len(statuses)}


def busy(stop: threading.Event) -> None:
    while not stop.is_set():
        burn_cpu(0.002)


def after_fork_burn() -> None:
    burn_cpu(0.2)


def main() -> None:
    global PARENT_PROFILER
    mode, scenario, out = sys.argv[1], sys.argv[2], sys.argv[3]
    stop = threading.Event()
    worker = threading.Thread(target=busy, args=(stop,), name="busy")
    worker.start()
    if mode != "none":
        cls = samprof.CPUProfiler if mode == "cpu" else samprof.WallProfiler
        PARENT_PROFILER = cls(hz=1000)
        PARENT_PROFILER.start()
    burn_cpu(0.05)
    result = {"fork": scenario_fork, "pool": scenario_pool, "exec": scenario_exec}[scenario]()
    prof = PARENT_PROFILER
    if prof is None:
        stop.set()
        worker.join()
        print(json.dumps(result), flush=True)
        return
    if not prof.running or not _core.is_running():
        fail("the parent's profile stopped after fork")
    with samprof.labels(phase="after-fork"):
        after_fork_burn()
    data = prof.stop()
    stop.set()
    worker.join()
    with open(out, "wb") as f:
        f.write(data)
    result["samples"] = prof.stats.samples if prof.stats else 0
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
