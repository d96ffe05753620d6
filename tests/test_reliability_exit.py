"""Leaving the process while samprof profiles and daemon threads are busy
(DESIGN.md §11): sys.exit(n), an unhandled exception, os._exit(n), SIGTERM
and SIGINT. The exit status is what it is without samprof, nothing hangs,
nothing crashes; each way is tried many times (timing varies between
runs), in CPU and in wall mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from conftest import SANITIZED

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "scripts"))

import reliability_helpers as rh  # noqa: E402

KINDS = ("sys.exit", "exception", "os._exit", "SIGTERM", "SIGINT")
# What python does without samprof (checked against a run without it).
EXPECTED = {"sys.exit": 3, "exception": 1, "os._exit": 4, "SIGTERM": -15, "SIGINT": -2}
# Repetitions of each way to exit, split between CPU and wall mode.
REPEATS = 20 if SANITIZED else 100
SCRIPT = os.path.join(rh.SCRIPTS, "exit_while_profiling.py")


def _fresh_runs(jobs):
    """Runs each job in a fresh interpreter, all at once; returns
    [(job, status, stderr)]."""
    procs = []
    for kind, profiler, seed in jobs:
        procs.append(
            subprocess.Popen(
                [sys.executable, SCRIPT, "run", kind, profiler, str(seed)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=rh.child_env(),
                text=True,
                errors="replace",
            )
        )
    results = []
    deadline = time.monotonic() + 120
    for job, proc in zip(jobs, procs):
        try:
            _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"{job} hung:\n{err[-3000:]}") from None
        results.append((job, proc.returncode, err))
    return results


def _check_stderr(kind, stderr, what):
    report = rh.crash_report(stderr)
    assert report is None, f"{what} crashed:\n{report}"
    if kind == "exception":
        assert "RuntimeError: unhandled on purpose" in stderr, (what, stderr)
    elif kind == "SIGINT":
        assert "KeyboardInterrupt" in stderr, (what, stderr)
    else:
        assert stderr == "", (what, stderr)


def test_exit_status_is_what_python_gives(tmp_path):
    # Fresh interpreters: without samprof (the reference), and with it.
    jobs = [
        (kind, profiler, i) for i, kind in enumerate(KINDS) for profiler in ("none", "cpu", "wall")
    ]
    fresh = _fresh_runs(jobs)
    reference = {kind: status for (kind, profiler, _), status, _ in fresh if profiler == "none"}
    assert reference == EXPECTED, reference
    for (kind, profiler, _), status, stderr in fresh:
        _check_stderr(kind, stderr, (kind, profiler))
        assert status == reference[kind], (kind, profiler, status, stderr)

    # Many more, forked from one interpreter (a fresh python per run would
    # cost seconds); the reference runs go through the same path.
    many = [(kind, "none", i) for kind in KINDS for i in range(2)]
    many += [(kind, "cpu" if i % 2 == 0 else "wall", i) for kind in KINDS for i in range(REPEATS)]
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(many))
    parallel = max(2, min(8, 2 * (os.cpu_count() or 1)))
    proc = rh.run_script(
        "exit_while_profiling.py", "many", str(jobs_file), str(parallel), timeout=600
    )
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    failures = []
    for r in results:
        kind, profiler, seed = r["job"]
        if r["hang"] is not None:
            failures.append(f"{kind} with {profiler} (seed {seed}) hung:\n{r['hang']}")
            continue
        if r["status"] != EXPECTED[kind]:
            failures.append(
                f"{kind} with {profiler} (seed {seed}): exit status {r['status']}, "
                f"expected {EXPECTED[kind]}\n{r['stderr']}"
            )
            continue
        try:
            _check_stderr(kind, r["stderr"], (kind, profiler, seed))
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, f"{len(failures)} of {len(results)} runs went wrong:\n" + "\n".join(
        failures[:10]
    )
