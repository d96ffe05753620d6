"""Runs measurement subprocesses and pairs them.

Every measurement is a fresh ``python -m benchmarks.child`` process, so no
profiler sees another's leftovers. For an out-of-process profiler the child
runs under the profiler's command; the harness reaps the profiler with
``wait4``, whose resource usage covers the profiler and the child it reaped,
and takes the child's own CPU (which the child reports) away from it to get
the profiler process's CPU.

A *cell* is one workload under one profiler: ``repeats`` pairs of runs, each
pair an unprofiled baseline and a profiled run back to back, the order
alternating from pair to pair so that slow drifts of the machine hit both
sides equally.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from benchmarks import profilers

# A profiled run slower than this many times its baseline gets at most
# SLOW_REPEATS pairs: its overhead is far outside the noise, and at 2 s of
# baseline work each pair of an instrumenting profiler on call-heavy code can
# take a minute.
SLOW_RATIO = 3.0
SLOW_REPEATS = 3


@dataclass
class Cell:
    workload: str
    profiler: str
    pairs: List[Tuple[Dict[str, Any], Dict[str, Any]]] = field(default_factory=list)


class Processes:
    """What starts measurement processes needs: the interpreter
    (``python``, the benchmark environment's), the repository, a scratch
    folder (``workdir``), and the environment they run in (``clean_env``:
    without PYTHONPATH, so that the installed samprof is the one imported;
    hash seed fixed)."""

    def __init__(
        self,
        python: str,
        repo: str,
        workdir: str,
        clean_env: bool,
        log: Callable[[str], None],
        keep: bool = False,
    ) -> None:
        self.python = python
        self.repo = repo
        self.workdir = workdir
        self.log = log
        self.keep = keep
        self.counter = 0
        env = dict(os.environ)
        if clean_env:
            env.pop("PYTHONPATH", None)
        env["PYTHONHASHSEED"] = "0"
        self.env = env
        os.makedirs(workdir, exist_ok=True)


class Runner(Processes):
    """Runs measurement subprocesses of the workloads at ``scale``."""

    def __init__(
        self,
        python: str,
        repo: str,
        workdir: str,
        scale: float,
        clean_env: bool,
        log: Callable[[str], None],
        keep: bool = False,
    ) -> None:
        super().__init__(python, repo, workdir, clean_env, log, keep)
        self.scale = scale

    # ----------------------------------------------------------------------

    def run(
        self,
        workload: str,
        profiler_id: str,
        duration_hint_s: float = 2.0,
        seconds: Optional[float] = None,
        timeout_s: float = 600.0,
    ) -> Dict[str, Any]:
        """One measurement; always returns a dict, with ``error`` set if the
        run failed."""
        proc, paths, started = self.launch(workload, profiler_id, duration_hint_s, seconds)
        return self.finish(proc, paths, started, timeout_s)

    def launch(
        self,
        workload: str,
        profiler_id: str,
        duration_hint_s: float,
        seconds: Optional[float],
    ) -> Tuple[subprocess.Popen, Dict[str, str], float]:
        spec = profilers.BY_ID[profiler_id]
        self.counter += 1
        stem = os.path.join(self.workdir, f"{self.counter:05d}-{workload}-{profiler_id}")
        paths = {
            "spec": stem + ".spec.json",
            "result": stem + ".result.json",
            "profile": stem + ".profile",
            "stdout": stem + ".stdout",
            "stderr": stem + ".stderr",
            "workload": workload,
            "profiler": profiler_id,
        }
        with open(paths["spec"], "w") as f:
            json.dump(
                {
                    "workload": workload,
                    "scale": self.scale,
                    "profiler": profiler_id,
                    "duration_hint_s": duration_hint_s,
                    "seconds": seconds,
                },
                f,
            )
        command = [self.python, "-m", "benchmarks.child", paths["spec"], paths["result"]]
        if spec.kind == profilers.OUT_OF_PROCESS:
            command = profilers.wrap_command(spec, command, paths["profile"])
        with open(paths["stdout"], "wb") as out, open(paths["stderr"], "wb") as err:
            proc = subprocess.Popen(
                command,
                cwd=self.repo,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        return proc, paths, time.perf_counter()

    def finish(
        self,
        proc: subprocess.Popen,
        paths: Dict[str, str],
        started: float,
        timeout_s: float,
    ) -> Dict[str, Any]:
        spec = profilers.BY_ID[paths["profiler"]]
        hwm = _HighWaterMark(proc.pid) if spec.kind == profilers.OUT_OF_PROCESS else None
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
            if hwm is not None:
                hwm.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - started

        run: Dict[str, Any] = {}
        if os.path.exists(paths["result"]):
            with open(paths["result"]) as f:
                run = json.load(f)
        run.update(
            {
                "workload": paths["workload"],
                "profiler": paths["profiler"],
                "returncode": proc.returncode,
                "elapsed_s": elapsed,
                "wait4_cpu_s": usage.ru_utime + usage.ru_stime,
                "wait4_maxrss_kib": usage.ru_maxrss,
            }
        )
        if hwm is not None:
            run["tool_maxrss_kib"] = hwm.value
        if killed.is_set():
            run["error"] = f"killed after {timeout_s:.0f} s"
        elif proc.returncode != 0 or "cpu_s" not in run:
            run["error"] = f"{_exit_text(proc.returncode)}: " + _tail(paths["stderr"])
        elif spec.kind == profilers.OUT_OF_PROCESS:
            workload_groups = run.get("truth", {}).keys()
            if os.path.exists(paths["profile"]):
                try:
                    run["profile"] = profilers.collapsed_group_values(
                        paths["profile"], spec.family, list(workload_groups)
                    )
                except (OSError, ValueError) as e:
                    run["profile_error"] = f"{type(e).__name__}: {e}"
                run["profile_bytes"] = os.path.getsize(paths["profile"])
            else:
                run["profile_error"] = "the profiler wrote no output: " + _tail(paths["stderr"])
        if not self.keep:
            for key in ("spec", "result", "profile", "stdout", "stderr"):
                try:
                    os.unlink(paths[key])
                except FileNotFoundError:
                    pass
        return run

    # ----------------------------------------------------------------------

    def cell(
        self,
        workload: str,
        profiler_id: str,
        repeats: int,
        duration_hint_s: float,
        progress: str,
        after_pair: Optional[Callable[[], None]] = None,
    ) -> Cell:
        """``repeats`` baseline/profiled pairs (fewer for very slow
        profilers: see SLOW_RATIO); ``after_pair`` runs after each pair."""
        cell = Cell(workload, profiler_id)
        timeout = max(120.0, 60 * duration_hint_s)
        wanted = repeats
        i = 0
        while i < wanted:
            first_base = i % 2 == 0
            order = ["none", profiler_id] if first_base else [profiler_id, "none"]
            runs = [self.run(workload, p, duration_hint_s, timeout_s=timeout) for p in order]
            base, prof = runs if first_base else runs[::-1]
            cell.pairs.append((base, prof))
            self.log(f"{progress} pair {i + 1}/{wanted}: {_describe(base, prof)}")
            if after_pair is not None:
                after_pair()
            if (
                i == 0
                and "error" not in base
                and "error" not in prof
                and prof["cpu_s"] > SLOW_RATIO * base["cpu_s"]
            ):
                wanted = min(wanted, SLOW_REPEATS)
            i += 1
            failed = sum(1 for _, p in cell.pairs if "error" in p)
            if failed >= 2 and failed == len(cell.pairs):
                break  # it fails every time: no need to see it fail again
        return cell

    def concurrent_pair(
        self, workload: str, profiler_id: str, seconds: float
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """A baseline and a profiled run side by side (for memory, which
        does not depend on timing)."""
        launched = [self.launch(workload, p, seconds, seconds) for p in ("none", profiler_id)]
        base, prof = [self.finish(*item, timeout_s=seconds * 3 + 120) for item in launched]
        return base, prof


class _HighWaterMark:
    """Polls a process's peak RSS (VmHWM) until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.value: Optional[int] = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        path = f"/proc/{self.pid}/status"
        while not self._done.wait(0.05):
            try:
                with open(path) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self.value = int(line.split()[1])
            except (OSError, ValueError):
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _tail(path: str, limit: int = 1500) -> str:
    """The end of a stderr file, after faulthandler's fatal-error line if
    there is one (a crash dump can push it out of the tail)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return "(no stderr)"
    text = data.decode("utf-8", "replace").strip()
    fatal = [line for line in text.splitlines() if line.startswith("Fatal Python error")]
    if len(text) > limit:
        text = "..." + text[-limit:]
    if fatal and fatal[0] not in text:
        text = fatal[0] + "\n" + text
    return text or "(no stderr)"


def _describe(base: Dict[str, Any], prof: Dict[str, Any]) -> str:
    if "error" in base:
        return "baseline failed: " + base["error"].splitlines()[0]
    if "error" in prof:
        return "profiled run failed: " + prof["error"].splitlines()[-1][:200]
    cpu = prof["cpu_s"] / base["cpu_s"]
    wall = prof["wall_s"] / base["wall_s"]
    return f"base {base['cpu_s']:.2f}s cpu, ratio cpu {cpu:.3f} wall {wall:.3f}"


def python_version(python: str) -> str:
    done = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip() or sys.version.split()[0]
