"""Per-request overhead of profiling middleware on a small web application
under load.

Each measurement starts a real server on loopback (gunicorn with one sync
worker for the Flask application, uvicorn for the Starlette one; both in
benchmarks/webapps.py), warms it up, reads the serving process's CPU time
through ``/_cpu``, sends ``requests`` requests one after another on fresh
connections, reads the CPU time again and stops the server. A request's cost
is the serving process's CPU time (every thread, the profiler's included)
over the requests, and its latency the client's time from connect to the
last byte. As for the other workloads, each variant is paired with an
unprofiled run, alternating which goes first, and the median ratio over the
pairs is reported; the ``none`` variant, paired with itself, is the noise.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from benchmarks.runner import Processes

ITEMS = 60  # rows on each page: about 1 ms of CPU in the handler here
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 30.0
WARMUP_REQUESTS = 30


@dataclass(frozen=True)
class Variant:
    id: str
    label: str
    description: str
    # The query string that asks this variant to profile a request.
    query: str = ""
    family: str = "samprof"  # what must be installed: samprof, werkzeug, pyinstrument
    apps: Tuple[str, ...] = ("flask", "starlette")


VARIANTS: List[Variant] = [
    Variant("none", "no middleware", "the application alone (the noise control)", family="none"),
    Variant(
        "samprof-off",
        "samprof, off",
        'samprof\'s middleware with `when="trigger"`, and no request asks: what it costs '
        "installed and idle",
    ),
    Variant(
        "samprof-100hz",
        "samprof, continuous 100 Hz",
        '`when="always"`: every request profiled, the CPU sampler at 100 Hz running all the '
        "time, route labels on every sample",
    ),
    Variant(
        "samprof-triggered",
        "samprof, triggered",
        '`when="trigger", hz=1000` and every request carries `?samprof`: each is profiled on '
        "its own and answered with its pprof file",
        query="samprof",
    ),
    Variant(
        "samprof-cprofile",
        "samprof, cProfile backend",
        '`backend="cprofile", when="always"`: every request under cProfile, merged into '
        "one pstats file per process",
    ),
    Variant(
        "werkzeug",
        "werkzeug ProfilerMiddleware",
        "`werkzeug.middleware.profiler.ProfilerMiddleware(app, stream=None, profile_dir=…)`: "
        "every request under cProfile, one .prof file per request",
        family="werkzeug",
        apps=("flask",),
    ),
    Variant(
        "pyinstrument",
        "pyinstrument ?profile",
        "pyinstrument's documented Flask and FastAPI recipes, every request carrying "
        "`?profile`: each is profiled on its own (1 ms interval) and answered with its HTML "
        "report",
        query="profile",
        family="pyinstrument",
    ),
]
BY_ID = {v.id: v for v in VARIANTS}
APPS = {
    "flask": "Flask under gunicorn (one sync worker)",
    "starlette": "Starlette under uvicorn (one worker, asyncio, h11)",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(python: str, app: str, port: int) -> List[str]:
    if app == "flask":
        return [
            python,
            "-m",
            "gunicorn",
            "--workers",
            "1",
            "--worker-class",
            "sync",
            "--bind",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            "benchmarks.webapps:flask_app",
        ]
    return [
        python,
        "-m",
        "uvicorn",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--loop",
        "asyncio",
        "--http",
        "h11",
        "--log-level",
        "warning",
        "--no-access-log",
        "benchmarks.webapps:starlette_app",
    ]


def get(port: int, path: str) -> Tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class WebRunner(Processes):
    """Starts servers and loads each with ``requests`` requests."""

    def __init__(
        self,
        python: str,
        repo: str,
        workdir: str,
        requests: int,
        clean_env: bool,
        log: Callable[[str], None],
        keep: bool = False,
    ) -> None:
        super().__init__(python, repo, workdir, clean_env, log, keep)
        self.requests = requests

    def run(self, app: str, variant_id: str) -> Dict[str, Any]:
        """One server, loaded; always returns a dict, with ``error`` set if
        the run failed."""
        variant = BY_ID[variant_id]
        self.counter += 1
        stem = os.path.join(self.workdir, f"{self.counter:05d}-{app}-{variant_id}")
        profile_dir = stem + ".profiles"
        os.makedirs(profile_dir, exist_ok=True)
        env = dict(self.env)
        env["SAMPROF_BENCH_WEB_VARIANT"] = variant_id
        env["SAMPROF_BENCH_WEB_DIR"] = profile_dir
        port = free_port()
        with open(stem + ".log", "wb") as out:
            proc = subprocess.Popen(
                server_command(self.python, app, port),
                cwd=self.repo,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            result = self._load(proc, port, variant)
        except Exception as e:
            result = {"error": f"{type(e).__name__}: {e}"}
        finally:
            stopped = self._stop(proc)
        if stopped is not None and "error" not in result:
            result["error"] = stopped
        if "error" in result:
            try:
                with open(stem + ".log", errors="replace") as f:
                    result["error"] += "\n" + f.read()[-1500:]
            except OSError:
                pass
        if not self.keep:
            shutil.rmtree(profile_dir, ignore_errors=True)
            if "error" not in result:
                os.unlink(stem + ".log")
        return result

    def _load(self, proc: subprocess.Popen, port: int, variant: Variant) -> Dict[str, Any]:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                return {"error": f"the server exited with status {proc.returncode} at start"}
            try:
                status, _ = get(port, "/_cpu")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                return {"error": f"the server did not answer within {START_TIMEOUT_S:g} s"}
            time.sleep(0.05)
        path = f"/items/{ITEMS}" + (f"?{variant.query}" if variant.query else "")
        for _ in range(WARMUP_REQUESTS):
            get(port, path)
        before = json.loads(get(port, "/_cpu")[1])
        latencies = []
        sizes = set()
        t0 = time.perf_counter()
        for _ in range(self.requests):
            t = time.perf_counter()
            status, body = get(port, path)
            latencies.append(time.perf_counter() - t)
            if status != 200:
                return {"error": f"GET {path} answered {status}: {body[:300]!r}"}
            sizes.add(len(body))
        wall = time.perf_counter() - t0
        after = json.loads(get(port, "/_cpu")[1])
        if after["pid"] != before["pid"]:
            return {"error": "the requests were served by more than one process"}
        n = self.requests
        return {
            "requests": n,
            "cpu_us": (after["cpu"] - before["cpu"]) / n * 1e6,
            "latency_mean_us": wall / n * 1e6,
            "latency_median_us": statistics.median(latencies) * 1e6,
            "latency_p99_us": sorted(latencies)[min(n - 1, int(n * 0.99))] * 1e6,
            "response_bytes": max(sizes),
        }

    def _stop(self, proc: subprocess.Popen) -> Optional[str]:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return f"the server did not stop within {STOP_TIMEOUT_S:g} s of SIGTERM"
        return None

    def cell(self, app: str, variant_id: str, repeats: int, progress: str) -> List[List[Any]]:
        """``repeats`` pairs (unprofiled, variant), the order alternating."""
        pairs: List[List[Any]] = []
        for i in range(repeats):
            if i % 2 == 0:
                base = self.run(app, "none")
                prof = self.run(app, variant_id)
            else:
                prof = self.run(app, variant_id)
                base = self.run(app, "none")
            pairs.append([base, prof])
            self.log(f"{progress} pair {i + 1}/{repeats}: {_pair_text(base, prof)}")
        return pairs


def _pair_text(base: Dict[str, Any], prof: Dict[str, Any]) -> str:
    if "error" in base or "error" in prof:
        error = base.get("error") or prof.get("error") or ""
        return "error: " + error.splitlines()[0][:200]
    return (
        f"CPU/request {base['cpu_us']:.0f} -> {prof['cpu_us']:.0f} µs, "
        f"latency {base['latency_mean_us']:.0f} -> {prof['latency_mean_us']:.0f} µs"
    )


def available(variant: Variant) -> Optional[str]:
    """None if the variant can run in this interpreter, else why not."""
    modules = {
        "none": [],
        "samprof": ["samprof"],
        "werkzeug": ["werkzeug"],
        "pyinstrument": ["pyinstrument"],
    }[variant.family]
    for module in modules:
        try:
            __import__(module)
        except ImportError as e:
            return f"{module} is not installed ({e})"
    return None


def servers_available() -> Optional[str]:
    for module in ("flask", "gunicorn", "starlette", "uvicorn"):
        try:
            __import__(module)
        except ImportError as e:
            return f"{module} is not installed ({e})"
    return None


def versions() -> Dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("flask", "werkzeug", "gunicorn", "starlette", "uvicorn", "pyinstrument"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out
