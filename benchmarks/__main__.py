"""Entry point: ``python -m benchmarks [--quick] [--repeats N] [--out MD] [--plot PNG]``.

Measures samprof's overhead, accuracy and memory against other Python
profilers; see benchmarks/__init__.py and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from benchmarks import environment, floor, profilers, report, runner, web, workloads

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Workload scale: about 2 s of work per run for the full benchmark, about
# 0.3 s for --quick.
FULL_SCALE = 1.0
QUICK_SCALE = 0.15
# Requests per web benchmark run (about 0.6 ms each unprofiled here).
FULL_REQUESTS = 1000
QUICK_REQUESTS = 60

# Profilers run on the call-heavy and mixed workloads only, to put more
# points on the overhead-vs-rate plot.
RATE_ONLY = {"samprof-cpu-10k", "pyinstrument-10ms", "py-spy-1k", "austin-1k"}
RATE_WORKLOADS = ["call-heavy", "mixed"]
# The idle-thread workloads ask how a profiler copes with many threads that
# do nothing: samprof in both modes, and py-spy, which pauses the target.
IDLE_PROFILERS = ["samprof-cpu-100", "samprof-wall-100", "py-spy-100", "py-spy-100-nonblocking"]
# At this many idle threads and more, only samprof's wall mode, which has a
# target there.
IDLE_WALL_ONLY = 2000
# The heap profilers run on these workloads only, and nothing else does.
HEAP_WORKLOADS = ["alloc-heavy", "mixed"]
COST_PROFILER = "samprof-cpu-10k-perf"
MEMORY_PROFILER = "samprof-cpu-100"
# Used only for the cost-per-sample measurement.
SPECIAL = {COST_PROFILER}

FAMILY_TO_PEER = {
    "yappi": "yappi",
    "pyinstrument": "pyinstrument",
    "py-spy": "py-spy",
    "py-spy nonblocking": "py-spy",
    "austin": "austin",
    "zprofile": "zprofile",
    "memray": "memray",
}


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Overhead, accuracy and memory of samprof and other Python profilers.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: one short pair per workload, samprof and the stdlib only",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="paired runs per measurement (default 5)"
    )
    parser.add_argument("--out", help="write the report (Markdown) here, e.g. docs/benchmarks.md")
    parser.add_argument("--plot", help="write the overhead-vs-rate plot (PNG) here")
    parser.add_argument(
        "--json",
        default=None,
        help="raw results (default build/benchmarks/results.json, "
        "--quick: build/benchmarks/quick/results.json)",
    )
    parser.add_argument(
        "--report-only",
        metavar="RESULTS_JSON",
        help="measure nothing: write --out/--plot from an earlier run's raw results",
    )
    parser.add_argument(
        "--venv", default=".venv-bench", help="benchmark environment (default .venv-bench)"
    )
    parser.add_argument(
        "--python",
        default=None,
        help="interpreter to create the environment with (default: this one)",
    )
    parser.add_argument(
        "--no-venv",
        action="store_true",
        help="run with this interpreter as it is (samprof and peers must be importable)",
    )
    parser.add_argument(
        "--samprof-source", default=".", help="what to pip install as samprof (default .)"
    )
    parser.add_argument("--profilers", help="comma-separated profiler ids to run (default all)")
    parser.add_argument(
        "--workloads",
        help="comma-separated workloads to run (default all; e.g. mixed,idle-100,web-flask)",
    )
    parser.add_argument(
        "--memory-seconds",
        type=float,
        default=None,
        help="length of the memory measurement (default 60, --quick 3)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep every run's files under build/benchmarks/runs"
    )
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.json is None:
        parts = ["build", "benchmarks"] + (["quick"] if args.quick else []) + ["results.json"]
        args.json = os.path.join(*parts)
    if args.memory_seconds is None:
        args.memory_seconds = 3.0 if args.quick else 60.0
    return args


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def ensure_environment(args: argparse.Namespace, argv: List[str]) -> None:
    """Unless --no-venv, set up the benchmark environment and re-run this
    command inside it (does not return in that case)."""
    if args.no_venv or environment.in_venv(args.venv):
        return
    peers = [] if args.quick else list(environment.PEERS)
    peers.append(environment.WEB_PEER)
    if args.plot:
        peers.append(environment.PLOT_PEER)
    environment.prepare(args.venv, args.python or sys.executable, args.samprof_source, peers, log)
    python = environment.venv_python(args.venv)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["SAMPROF_BENCH_COMMAND"] = " ".join(["python3", "-m", "benchmarks"] + argv)
    sys.stdout.flush()
    os.execve(python, [python, "-m", "benchmarks"] + argv, env)


def probe_all(specs: List[profilers.Spec], venv: str) -> Dict[str, Dict[str, Any]]:
    """Availability of every profiler family: {family: {ok, version|error}}."""
    installs = environment.install_report(venv)
    out: Dict[str, Dict[str, Any]] = {}
    for spec in specs:
        if spec.family in out:
            continue
        try:
            out[spec.family] = {"ok": True, "version": profilers.probe(spec.family)}
        except Exception as e:
            error = f"{type(e).__name__}: {e}" if not isinstance(e, RuntimeError) else str(e)
            peer = installs.get(FAMILY_TO_PEER.get(spec.family, ""))
            if peer is not None and not peer.get("ok"):
                error = "; ".join(
                    f"{a['requirement']}: {a['error']}" for a in peer["attempts"] if a["error"]
                )
            elif peer is None and spec.family in FAMILY_TO_PEER:
                error = f"not installed ({error})"
            out[spec.family] = {"ok": False, "error": error}
    return out


def plan(
    args: argparse.Namespace, available: Dict[str, Dict[str, Any]]
) -> List[Tuple[str, str, str]]:
    """The cells to measure, as (section, workload, profiler id)."""
    chosen = set(args.profilers.split(",")) if args.profilers else None
    only = set(args.workloads.split(",")) if args.workloads else None

    def usable(spec: profilers.Spec) -> bool:
        if chosen is not None and spec.id not in chosen:
            return False
        if args.quick and not spec.quick:
            return False
        return available[spec.family]["ok"]

    def wanted(workload: str) -> bool:
        return only is None or workload in only

    cells = []
    for workload in workloads.CORE:
        if not wanted(workload):
            continue
        for spec in profilers.SPECS:
            if spec.id in SPECIAL or spec.clock == "heap" or not usable(spec):
                continue
            if spec.id in RATE_ONLY and workload not in RATE_WORKLOADS:
                continue
            cells.append(("core", workload, spec.id))
    for workload in HEAP_WORKLOADS:
        if not wanted(workload):
            continue
        for spec in profilers.SPECS:
            # The noise control of a core workload is measured there.
            control = spec.id == "none" and workload not in workloads.CORE
            if (spec.clock == "heap" or control) and usable(spec):
                cells.append(("heap", workload, spec.id))
    for n in workloads.IDLE_COUNTS:
        workload = f"idle-{n}"
        if not wanted(workload):
            continue
        # One noise control, at 100 idle threads, to keep the run short: the
        # wall-mode targets at 500 and 2,000 are read beside it too.
        ids = (["none"] if n == 100 else []) + (
            ["samprof-wall-100"] if n >= IDLE_WALL_ONLY else IDLE_PROFILERS
        )
        for profiler_id in ids:
            if usable(profilers.BY_ID[profiler_id]):
                cells.append(("idle", workload, profiler_id))
    cost = profilers.BY_ID[COST_PROFILER]
    for depth in workloads.DEPTHS:
        workload = f"depth-{depth}"
        if wanted(workload) and usable(cost):
            cells.append(("cost", workload, COST_PROFILER))
    return cells


def machine_info() -> Dict[str, Any]:
    import platform
    import subprocess

    def read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""

    cpu = "unknown"
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    distro = ""
    for line in read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            distro = line.split("=", 1)[1].strip('"')

    def git(*cmd: str) -> str:
        try:
            done = subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True)
        except OSError:
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    dirty = git("status", "--porcelain", "--", "src", "setup.py", "pyproject.toml")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "os": distro,
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "perf_event_paranoid": read("/proc/sys/kernel/perf_event_paranoid").strip(),
        "loadavg_start": read("/proc/loadavg").split()[:3],
        "steal_start_s": steal_seconds(),
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "git_src_dirty": bool(dirty),
    }


def steal_seconds() -> Optional[float]:
    """CPU time the hypervisor took from this machine so far (all CPUs)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def save(path: str, results: Dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)


def measure(args: argparse.Namespace, argv: List[str]) -> Dict[str, Any]:
    scale = QUICK_SCALE if args.quick else FULL_SCALE
    specs = [spec for spec in profilers.SPECS if spec.quick or not args.quick]
    available = probe_all(specs, args.venv)
    for family, info in available.items():
        status = info["version"] if info["ok"] else "UNAVAILABLE: " + info["error"]
        log(f"{family}: {status}")
    cells = plan(args, available)
    import samprof

    command = os.environ.get("SAMPROF_BENCH_COMMAND") or " ".join(
        ["python3", "-m", "benchmarks"] + argv
    )
    results: Dict[str, Any] = {
        "meta": {
            "command": command,
            "quick": args.quick,
            "repeats": args.repeats,
            "scale": scale,
            "slow_ratio": runner.SLOW_RATIO,
            "slow_repeats": runner.SLOW_REPEATS,
            "machine": machine_info(),
            "samprof_version": samprof.__version__,
            "samprof_path": os.path.dirname(samprof.__file__),
            "available": available,
            "installs": environment.install_report(args.venv),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        },
        "workloads": {},
        "cells": [],
        "memory": None,
    }
    scratch = os.path.dirname(os.path.abspath(args.json))
    run = runner.Runner(
        sys.executable,
        REPO,
        os.path.join(scratch, "runs"),
        scale,
        clean_env=not args.no_venv,
        log=log,
        keep=args.keep,
    )
    kernel_floor: Optional[floor.Floor] = None
    t_start = time.perf_counter()
    hints: Dict[str, float] = {}
    total = len(cells)
    for i, (section, workload, profiler_id) in enumerate(cells):
        if workload not in hints:
            # A warm-up run, discarded: it fills the page cache and tells how
            # long the workload takes here (zprofile needs to know).
            warm = run.run(workload, "none")
            if "error" in warm:
                log(f"{workload}: baseline failed: {warm['error']}")
                hints[workload] = 2.0
            else:
                hints[workload] = warm["wall_s"]
            w = workloads.make(workload, scale)
            results["workloads"][workload] = w.description
        with open("/proc/loadavg") as f:
            results["meta"]["machine"].setdefault("loadavg_samples", []).append(
                float(f.read().split()[0])
            )
        elapsed = time.perf_counter() - t_start
        progress = f"[{i + 1}/{total} {elapsed / 60:.1f} min] {workload} x {profiler_id}"
        after_pair = None
        if section == "cost":
            if kernel_floor is None:
                kernel_floor = floor.Floor(os.path.join(scratch, "floor"), scale)
                results["floor"] = {"period_ns": floor.PERIOD_NS, "pairs": {}, "error": None}
            floor_pairs = results["floor"]["pairs"].setdefault(workload, [])

            def after_pair(kf: floor.Floor = kernel_floor, out: List[Any] = floor_pairs) -> None:
                pair = kf.pair()
                if pair is not None:
                    out.append(pair)

        cell = run.cell(workload, profiler_id, args.repeats, hints[workload], progress, after_pair)
        if section == "cost" and kernel_floor is not None:
            results["floor"]["error"] = kernel_floor.error
            log(f"{workload}: kernel floor {floor.cost_us(floor_pairs)} µs per signal")
        results["cells"].append(
            {
                "section": section,
                "workload": workload,
                "profiler": profiler_id,
                "pairs": [list(pair) for pair in cell.pairs],
            }
        )
        save(args.json, results)

    results["web"] = measure_web(args, scratch)
    save(args.json, results)

    memory_spec = profilers.BY_ID[MEMORY_PROFILER]
    memory_wanted = args.workloads is None or "soak" in args.workloads.split(",")
    if available[memory_spec.family]["ok"] and memory_wanted:
        log(
            f"memory: {args.memory_seconds:g} s soak, unprofiled and {MEMORY_PROFILER} side by side"
        )
        base, prof = run.concurrent_pair("soak", MEMORY_PROFILER, args.memory_seconds)
        results["memory"] = {"seconds": args.memory_seconds, "base": base, "prof": prof}
        results["workloads"]["soak"] = workloads.make(
            "soak", scale, args.memory_seconds
        ).description
    results["meta"]["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    with open("/proc/loadavg") as f:
        results["meta"]["machine"]["loadavg_end"] = f.read().split()[:3]
    steal = steal_seconds()
    start_steal = results["meta"]["machine"]["steal_start_s"]
    if steal is not None and start_steal is not None:
        results["meta"]["machine"]["steal_s"] = steal - start_steal
    results["meta"]["duration_s"] = time.perf_counter() - t_start
    save(args.json, results)
    log(f"done in {(time.perf_counter() - t_start) / 60:.1f} min; raw results in {args.json}")
    return results


def measure_web(args: argparse.Namespace, scratch: str) -> Dict[str, Any]:
    """The web section: each application under each middleware variant,
    paired with the bare application (see benchmarks/web.py)."""
    requests = QUICK_REQUESTS if args.quick else FULL_REQUESTS
    out: Dict[str, Any] = {
        "requests": requests,
        "items": web.ITEMS,
        "apps": dict(web.APPS),
        "variants": {v.id: {"label": v.label, "description": v.description} for v in web.VARIANTS},
        "versions": web.versions(),
        "unavailable": {},
        "cells": [],
    }
    only = set(args.workloads.split(",")) if args.workloads else None
    apps = [app for app in web.APPS if only is None or f"web-{app}" in only]
    if not apps:
        return out
    missing = web.servers_available()
    if missing is not None:
        out["unavailable"]["servers"] = missing
        log(f"web: not measured: {missing}")
        return out
    cells = []
    for variant in web.VARIANTS:
        if args.quick and variant.family not in ("none", "samprof"):
            continue
        why = web.available(variant)
        if why is not None:
            out["unavailable"][variant.id] = why
            continue
        cells += [(app, variant.id) for app in apps if app in variant.apps]
    runner_ = web.WebRunner(
        sys.executable,
        REPO,
        os.path.join(scratch, "web"),
        requests,
        clean_env=not args.no_venv,
        log=log,
        keep=args.keep,
    )
    t0 = time.perf_counter()
    for i, (app, variant_id) in enumerate(cells):
        minutes = (time.perf_counter() - t0) / 60
        progress = f"[web {i + 1}/{len(cells)} {minutes:.1f} min] {app} x {variant_id}"
        pairs = runner_.cell(app, variant_id, args.repeats, progress)
        out["cells"].append({"app": app, "variant": variant_id, "pairs": pairs})
    return out


def own_failures(results: Dict[str, Any]) -> List[str]:
    """Failed runs of samprof itself or of the unprofiled baseline: these
    make the command fail. A peer's failure is reported, not fatal, and so
    is a failure of the cost-per-sample runs, which force the perf engine
    that a machine may not offer (perf_event_paranoid, seccomp)."""
    failed = []
    for cell in results["cells"]:
        if cell["section"] == "cost":
            continue
        for base, prof in cell["pairs"]:
            runs = [("baseline", base)]
            if cell["profiler"].startswith("samprof") or cell["profiler"] == "none":
                runs.append((cell["profiler"], prof))
            for name, run in runs:
                if "error" in run:
                    failed.append(f"{cell['workload']} / {name}: {run['error'][-300:]}")
    for cell in (results.get("web") or {}).get("cells", []):
        for base, prof in cell["pairs"]:
            runs = [("baseline", base)]
            if cell["variant"].startswith("samprof") or cell["variant"] == "none":
                runs.append((cell["variant"], prof))
            for name, run in runs:
                if "error" in run:
                    failed.append(f"web {cell['app']} / {name}: {run['error'][-300:]}")
    memory = results.get("memory") or {}
    for name in ("base", "prof"):
        if "error" in (memory.get(name) or {}):
            failed.append(f"memory / {name}: {memory[name]['error'][-300:]}")
    return failed


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.chdir(REPO)
    args = parse_args(argv)
    if args.report_only:
        with open(args.report_only) as f:
            results = json.load(f)
    else:
        ensure_environment(args, argv)
        results = measure(args, argv)
    print(report.summary(results))
    for path in (args.out, args.plot):
        if path and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
    image = None
    if args.plot:
        error = report.plot(results, args.plot)
        if error:
            log(f"no plot: {error}")
        else:
            log(f"wrote {args.plot}")
            image = os.path.relpath(args.plot, os.path.dirname(args.out or ".") or ".")
    if args.out:
        with open(args.out, "w") as f:
            f.write(report.markdown(results, image))
        log(f"wrote {args.out}")
    failed = own_failures(results)
    if failed:
        for line in failed:
            log(f"FAILED: {line}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
