"""Turns raw results into figures: a text summary, docs/benchmarks.md and
the overhead-vs-rate plot.

Every figure is a median over paired runs (see runner.py); nothing here
measures anything.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Dict, List, Optional, Tuple

from benchmarks import floor, profilers, workloads

Run = Dict[str, Any]
Pair = Tuple[Run, Run]


# --------------------------------------------------------------------------
# Per-run and per-cell figures.


def accuracy_pp(run: Run) -> Tuple[Optional[float], str]:
    """Largest gap, in percentage points, between the profile's share of a
    call group and the group's share of CPU measured by the workload; None
    and the reason when there is no profile to compare."""
    truth = run.get("truth") or {}
    profile = run.get("profile")
    if run.get("profile_error"):
        return None, run["profile_error"]
    if not profile:
        return None, "the profiler gives no per-function figures here"
    t_total = sum(truth.values())
    p_total = sum(profile.get(g, 0.0) for g in truth)
    if t_total <= 0:
        return None, "the workload measured no CPU in its call groups"
    if p_total <= 0:
        return None, (
            "no profile weight in the call groups: the profiler did not see their threads, "
            "or put their time elsewhere"
        )
    gaps = [abs(profile.get(g, 0.0) / p_total - truth[g] / t_total) for g in truth]
    return 100.0 * max(gaps), ""


def _median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def summarize(cell: Dict[str, Any]) -> Dict[str, Any]:
    """Medians (and ranges) of one cell's pairs."""
    pairs: List[Pair] = [tuple(p) for p in cell["pairs"]]  # type: ignore[misc]
    ok = [(b, p) for b, p in pairs if "error" not in b and "error" not in p]
    errors = [p["error"] for b, p in pairs if "error" in p]
    errors += ["baseline: " + b["error"] for b, p in pairs if "error" in b]
    cpu = [p["cpu_s"] / b["cpu_s"] for b, p in ok]
    wall = [p["wall_s"] / b["wall_s"] for b, p in ok]
    rss = [(p["peak_rss_kib"] - b["peak_rss_kib"]) / 1024 for b, p in ok]
    acc, acc_reasons = [], []
    for _b, p in ok:
        value, reason = accuracy_pp(p)
        if value is None:
            acc_reasons.append(reason)
        else:
            acc.append(value)
    out: Dict[str, Any] = {
        "n": len(ok),
        "pairs": len(pairs),
        "errors": errors,
        "cpu": _median(cpu),
        "cpu_range": (min(cpu), max(cpu)) if cpu else None,
        "wall": _median(wall),
        "wall_range": (min(wall), max(wall)) if wall else None,
        "rss_mib": _median(rss),
        "accuracy_pp": _median(acc),
        "accuracy_note": acc_reasons[0] if acc_reasons and not acc else "",
        "base_cpu_s": _median([b["cpu_s"] for b, _ in ok]),
        "base_wall_s": _median([b["wall_s"] for b, _ in ok]),
    }
    spec = profilers.BY_ID.get(cell["profiler"])
    if spec is not None and spec.kind == profilers.OUT_OF_PROCESS:
        # CPU of the profiler process: what wait4 saw minus what the target
        # itself used, less the same difference for the baseline (the
        # interpreter's own exit, after the target's last clock read).
        tool = [
            (p["wait4_cpu_s"] - p["cpu_total_s"]) - (b["wait4_cpu_s"] - b["cpu_total_s"])
            for b, p in ok
        ]
        out["tool_cpu_s"] = _median(tool)
        out["tool_cpu_frac"] = _median([t / b["cpu_s"] for t, (b, _) in zip(tool, ok)])
        hwm = [p["tool_maxrss_kib"] / 1024 for _, p in ok if p.get("tool_maxrss_kib")]
        out["tool_rss_mib"] = _median(hwm)
    details = [p.get("details") or {} for _, p in ok]
    if details and "engine" in details[0]:
        out["samprof"] = {
            "engines": sorted({d["engine"] for d in details}),
            "effective_hz": _median([d["effective_hz"] for d in details]),
            "samples_per_wall_s": _median(
                [d["samples"] / p["wall_s"] for d, (_, p) in zip(details, ok) if p["wall_s"]]
            ),
            "samples": _median([d["samples"] for d in details]),
            "signals": _median([d["signals"] for d in details]),
            "dropped": _median([sum(d["dropped"].values()) for d in details]),
            "dropped_kinds": sorted({k for d in details for k, v in d["dropped"].items() if v}),
            "truncated": _median([d["truncated"] for d in details]),
            "start_ms": _median([p["start_s"] * 1e3 for _, p in ok]),
            "stop_ms": _median([p["stop_s"] * 1e3 for _, p in ok]),
            "profile_kib": _median([(p.get("profile_bytes") or 0) / 1024 for _, p in ok]),
            "cost_us": _median(
                [
                    (p["cpu_s"] - b["cpu_s"]) / d["samples"] * 1e6
                    for (b, p), d in zip(ok, details)
                    if d["samples"]
                ]
            ),
        }
    return out


def summarize_web(pairs: List[List[Dict[str, Any]]]) -> Dict[str, Any]:
    """Medians over the good pairs: each side's CPU per request, the
    per-pair CPU and latency ratios, the CPU each request adds."""
    good = [(b, p) for b, p in pairs if "error" not in b and "error" not in p]
    errors = [r["error"] for pair in pairs for r in pair if "error" in r]
    if not good:
        return {"n": 0, "errors": errors}

    median = statistics.median
    return {
        "n": len(good),
        "errors": errors,
        "base_cpu_us": median([b["cpu_us"] for b, _ in good]),
        "cpu_us": median([p["cpu_us"] for _, p in good]),
        "added_cpu_us": median([p["cpu_us"] - b["cpu_us"] for b, p in good]),
        "cpu": median([p["cpu_us"] / b["cpu_us"] for b, p in good]),
        "cpu_range": (
            min(p["cpu_us"] / b["cpu_us"] for b, p in good),
            max(p["cpu_us"] / b["cpu_us"] for b, p in good),
        ),
        "latency": median([p["latency_mean_us"] / b["latency_mean_us"] for b, p in good]),
        "base_latency_us": median([b["latency_mean_us"] for b, _ in good]),
        "latency_us": median([p["latency_mean_us"] for _, p in good]),
        "p99_us": median([p["latency_p99_us"] for _, p in good]),
        "response_bytes": median([p["response_bytes"] for _, p in good]),
    }


def _index(results: Dict[str, Any]) -> Dict[Tuple[str, str], Dict[str, Any]]:
    return {(c["workload"], c["profiler"]): summarize(c) for c in results["cells"]}


# --------------------------------------------------------------------------
# Formatting.


def fmt_ratio(r: Optional[float]) -> str:
    """+1.2% below 2x, x3.4 above."""
    if r is None:
        return "n/a"
    if r >= 2:
        return f"×{r:.1f}"
    return f"{(r - 1) * 100:+.1f}%"


def fmt_pct(r: Optional[float]) -> str:
    return "n/a" if r is None else f"{(r - 1) * 100:+.1f}%"


def fmt_num(x: Optional[float], spec: str = ".1f", unit: str = "") -> str:
    return "n/a" if x is None else f"{x:{spec}}{unit}"


def _table(header: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _label(profiler_id: str) -> str:
    spec = profilers.BY_ID.get(profiler_id)
    return spec.label if spec else profiler_id


def _cell_text(s: Optional[Dict[str, Any]], fmt: Callable[[Dict[str, Any]], str]) -> str:
    if s is None:
        return "–"
    if s["n"] == 0:
        return "error" if s["errors"] else "n/a"
    text = fmt(s)
    if s["n"] < s["pairs"]:
        text += f" ({s['n']}/{s['pairs']} ok)"
    return text


def _grid(
    index: Dict[Tuple[str, str], Dict[str, Any]],
    workload_names: List[str],
    profiler_ids: List[str],
    fmt: Callable[[Dict[str, Any]], str],
) -> str:
    rows = []
    for pid in profiler_ids:
        cells = [index.get((w, pid)) for w in workload_names]
        if all(c is None for c in cells):
            continue
        rows.append([_label(pid)] + [_cell_text(c, fmt) for c in cells])
    return _table(["profiler"] + workload_names, rows)


def _ordered_ids(index: Dict[Tuple[str, str], Dict[str, Any]], section_ids: List[str]) -> List[str]:
    present = {pid for (_w, pid) in index}
    return [s.id for s in profilers.SPECS if s.id in present and s.id in section_ids]


def _section_ids(results: Dict[str, Any], section: str) -> List[str]:
    return sorted({c["profiler"] for c in results["cells"] if c["section"] == section})


def _workloads_of(results: Dict[str, Any], section: str) -> List[str]:
    seen: List[str] = []
    for c in results["cells"]:
        if c["section"] == section and c["workload"] not in seen:
            seen.append(c["workload"])
    return seen


# --------------------------------------------------------------------------
# Targets.


def _cost(index: Dict[Tuple[str, str], Dict[str, Any]], depth: int) -> Optional[Dict[str, Any]]:
    s = index.get((f"depth-{depth}", "samprof-cpu-10k-perf"))
    return s.get("samprof") if s else None


def memory_figures(results: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    m = results.get("memory")
    if not m:
        return None
    base, prof = m["base"], m["prof"]
    if "error" in base or "error" in prof:
        return {"error": base.get("error") or prof.get("error"), "seconds": m["seconds"]}
    details = prof.get("details") or {}
    return {
        "seconds": m["seconds"],
        "added_mib": (prof["peak_rss_kib"] - base["peak_rss_kib"]) / 1024,
        "base_mib": base["peak_rss_kib"] / 1024,
        "prof_mib": prof["peak_rss_kib"] / 1024,
        "growth_base_mib": (base["rss_end_kib"] - base["rss_before_kib"]) / 1024,
        "growth_prof_mib": (prof["rss_end_kib"] - prof["rss_before_kib"]) / 1024,
        "samples": details.get("samples"),
        "engine": details.get("engine"),
        "profile_kib": (prof.get("profile_bytes") or 0) / 1024,
    }


def targets(results: Dict[str, Any]) -> List[List[str]]:
    """Rows: what, target, measured, met."""
    index = _index(results)
    rows = []

    def overhead_row(
        what: str,
        pid: str,
        limit_pct: float,
        names: List[str],
        floor: Optional[str] = None,
        noise_at: Optional[str] = None,
    ) -> None:
        """floor: the id of a control measured beside pid (the pass-through
        allocator hook for the heap profiler), shown next to it. noise_at:
        the workload whose noise control stands for these (each its own
        when None)."""
        parts, worst = [], None
        for w in names:
            s = index.get((w, pid))
            if s is None or s["cpu"] is None:
                continue
            pct = (s["cpu"] - 1) * 100
            noise = index.get((noise_at or w, "none"))
            notes = []
            if noise and noise["cpu_range"]:
                lo, hi = noise["cpu_range"]
                at = f" at {noise_at}" if noise_at and noise_at != w else ""
                notes.append(f"noise{at} {(lo - 1) * 100:+.1f}…{(hi - 1) * 100:+.1f}%")
            under = index.get((w, floor)) if floor else None
            if under and under["cpu"] is not None:
                notes.append(f"{profilers.BY_ID[floor].label} {(under['cpu'] - 1) * 100:+.1f}%")
            parts.append(f"{w} {pct:+.1f}%" + (f" ({'; '.join(notes)})" if notes else ""))
            worst = pct if worst is None else max(worst, pct)
        if worst is None:
            available = results["meta"]["available"]
            family = profilers.BY_ID[pid].family
            reason = "not measured"
            if family in available and not available[family]["ok"]:
                reason = "not available: " + _key_line(available[family]["error"])
            rows.append([what, f"≤ {limit_pct:g}%", reason, "n/a"])
        else:
            verdict = "yes" if worst <= limit_pct else "no"
            rows.append([what, f"≤ {limit_pct:g}%", "; ".join(parts), verdict])

    core = workloads.CORE
    overhead_row("CPU overhead, samprof CPU at 100 Hz", "samprof-cpu-100", 1, core)
    overhead_row("CPU overhead, samprof CPU at 1 kHz", "samprof-cpu-1k", 3, core)
    cost = _cost(index, 50)
    if cost and cost["cost_us"] is not None:
        rows.append(
            [
                "cost per sample at stack depth 50",
                "≤ 2 µs",
                f"{cost['cost_us']:.2f} µs ({', '.join(cost['engines'])}, "
                f"{cost['effective_hz']:.0f} Hz effective)" + _floor_text(results),
                "yes" if cost["cost_us"] <= 2 else "no",
            ]
        )
    else:
        rows.append(["cost per sample at stack depth 50", "≤ 2 µs", "not measured", "n/a"])
    mem = memory_figures(results)
    if mem and "added_mib" in mem:
        rows.append(
            [
                f"memory added by a {mem['seconds']:g} s profile at 100 Hz (peak RSS)",
                "≤ 20 MiB",
                f"{mem['added_mib']:+.1f} MiB",
                "yes" if mem["added_mib"] <= 20 else "no",
            ]
        )
    else:
        rows.append(["memory added by a profile at 100 Hz", "≤ 20 MiB", "not measured", "n/a"])
    overhead_row(
        "CPU overhead, samprof heap at 512 KiB, allocation-heavy",
        "samprof-heap-512k",
        3,
        ["alloc-heavy"],
        floor="hook-floor",
    )
    overhead_row(
        "CPU overhead, samprof heap at 512 KiB, mixed",
        "samprof-heap-512k",
        1,
        ["mixed"],
        floor="hook-floor",
    )
    overhead_row(
        "CPU overhead, samprof wall at 100 Hz, 100 idle threads",
        "samprof-wall-100",
        1,
        ["idle-100"],
    )
    overhead_row(
        "CPU overhead, samprof wall at 100 Hz, 500 and 2,000 idle threads",
        "samprof-wall-100",
        2,
        ["idle-500", "idle-2000"],
        noise_at="idle-100",
    )
    return rows


# --------------------------------------------------------------------------
# Text summary (stdout).


def summary(results: Dict[str, Any]) -> str:
    index = _index(results)
    lines = ["", "== targets"]
    for what, target, measured, met in targets(results):
        lines.append(f"  {what}: {measured}  [target {target}: {met}]")
    names = _workloads_of(results, "core") + _workloads_of(results, "idle")
    lines.append("")
    lines.append("== CPU time overhead (median of paired runs)")
    lines.append("  " + "profiler".ljust(40) + "".join(w[:12].rjust(13) for w in names))
    for pid in [s.id for s in profilers.SPECS]:
        cells = [index.get((w, pid)) for w in names]
        if all(c is None for c in cells):
            continue
        text = [_cell_text(c, lambda s: fmt_ratio(s["cpu"])) for c in cells]
        lines.append("  " + _label(pid)[:40].ljust(40) + "".join(t[:12].rjust(13) for t in text))
    for depth in workloads.DEPTHS:
        cost = _cost(index, depth)
        if cost:
            lines.append(
                f"  cost per sample at depth {depth}: {fmt_num(cost['cost_us'], '.2f', ' µs')}"
            )
    mem = memory_figures(results)
    if mem and "added_mib" in mem:
        lines.append(
            f"  memory added ({mem['seconds']:g} s at 100 Hz): {mem['added_mib']:+.1f} MiB"
        )
    for app, variant, s in _web_cells(results):
        if s["n"]:
            lines.append(
                f"  web {app} {variant}: {s['cpu_us']:.0f} µs CPU per request "
                f"({fmt_ratio(s['cpu'])} against {s['base_cpu_us']:.0f} µs)"
            )
    for family, info in results["meta"]["available"].items():
        if not info["ok"]:
            lines.append(f"  unavailable: {family}: {info['error']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Plot.


RATE_SERIES = [
    # (label, profiler ids, color, tool-process CPU too)
    ("samprof CPU", ["samprof-cpu-100", "samprof-cpu-1k", "samprof-cpu-10k"], "C0", False),
    ("samprof wall", ["samprof-wall-100", "samprof-wall-1k"], "C1", False),
    ("py-spy (target)", ["py-spy-100", "py-spy-1k"], "C2", True),
    ("pyinstrument", ["pyinstrument-10ms", "pyinstrument-1ms"], "C3", False),
    ("austin (target)", ["austin-100", "austin-1k"], "C4", True),
]


def rate_points(
    index: Dict[Tuple[str, str], Dict[str, Any]], workload: str, ids: List[str], key: str
) -> List[Tuple[int, float]]:
    points = []
    for pid in ids:
        s = index.get((workload, pid))
        spec = profilers.BY_ID[pid]
        if s is None or spec.rate_hz is None:
            continue
        if key == "tool":
            value = s.get("tool_cpu_frac")
            if value is not None:
                points.append((spec.rate_hz, 100 * value))
        elif s.get(key) is not None:
            points.append((spec.rate_hz, 100 * (s[key] - 1)))
    return points


def plot(results: Dict[str, Any], path: str) -> Optional[str]:
    """Write the overhead-vs-rate plot; return an error text instead if it
    cannot be made."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError as e:
        return f"matplotlib is not installed ({e})"
    index = _index(results)
    names = [w for w in ("call-heavy", "mixed") if any(k[0] == w for k in index)]
    if not names:
        return "no call-heavy or mixed results"
    fig, axes = plt.subplots(1, len(names), figsize=(6.2 * len(names), 4.6), squeeze=False)
    for ax, workload in zip(axes[0], names):
        top = 1.0
        for label, ids, color, tool in RATE_SERIES:
            pts = rate_points(index, workload, ids, "cpu")
            if pts:
                xs, ys = zip(*pts)
                top = max(top, *ys)
                ax.plot(xs, ys, "o-", color=color, label=label)
            if tool:
                pts = rate_points(index, workload, ids, "tool")
                if pts:
                    xs, ys = zip(*pts)
                    top = max(top, *ys)
                    ax.plot(
                        xs,
                        ys,
                        "s--",
                        color=color,
                        alpha=0.6,
                        label=label.replace("(target)", "(its own process)"),
                    )
        ax.set_xscale("log")
        # Linear within ±1%, logarithmic beyond: samprof's 1% and
        # pyinstrument's 500% on one axis.
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(top=top * 3)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}%"))
        ax.set_xlabel("sampling rate (Hz)")
        ax.set_ylabel("CPU time added to the workload (symlog)")
        ax.axhline(0, color="grey", linewidth=0.6)
        ax.set_title(f"{workload}: median of paired runs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    machine = results["meta"]["machine"]
    fig.suptitle(
        f"Profiler CPU overhead vs sampling rate — Python {machine['python']}, "
        f"{machine['cores']} cores ({machine['cpu']})",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------
# docs/benchmarks.md


def _one_line(text: str, limit: int = 500) -> str:
    """An error message as one line of inline code."""
    text = " / ".join(line.strip() for line in str(text).splitlines() if line.strip())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return _code(text)


def _key_line(text: str) -> str:
    """The line of an error message that names the error (the last line
    that looks like one), else its last line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error:" in line or "not found" in line:
            return line
    return lines[-1] if lines else ""


def _failure_text(error: str) -> str:
    """A failed run's error, shortened: how it ended, and for a crash the
    fatal error line (faulthandler's), else the last lines of stderr."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    ending = lines[0].split(":", 1)[0]
    fatal = [line for line in lines if "Fatal Python error" in line]
    if fatal:
        return f"{ending}: " + fatal[0][fatal[0].index("Fatal Python error") :]
    return "\n".join(lines[-4:])


def _errors_section(results: Dict[str, Any]) -> List[str]:
    out = []
    for family, info in results["meta"]["available"].items():
        if not info["ok"]:
            out.append(f"- **{family}**: {_one_line(info['error'])}")
    for name, record in results["meta"].get("installs", {}).items():
        if record.get("ok"):
            failed = [a for a in record["attempts"] if a["error"]]
            for a in failed:
                out.append(
                    f"- **{name}**: `pip install {a['requirement']}` did not give a working "
                    f"{name}: {_one_line(_key_line(a['error']))}; measured with "
                    f"{record['installed']} "
                    f"instead."
                )
    for c in results["cells"]:
        s = summarize(c)
        if s["errors"]:
            out.append(
                f"- **{_label(c['profiler'])}** on {c['workload']}: {len(s['errors'])} of "
                f"{s['pairs']} runs failed: {_one_line(_failure_text(s['errors'][0]))}"
            )
    return out


def _floor_pairs(results: Dict[str, Any], workload: Optional[str] = None) -> List[Any]:
    """The kernel-floor pairs run beside ``workload``'s pairs (all if None)."""
    by_workload = (results.get("floor") or {}).get("pairs") or {}
    if workload is not None:
        return list(by_workload.get(workload, []))
    return [pair for pairs in by_workload.values() for pair in pairs]


def _floor_cost(results: Dict[str, Any], workload: Optional[str] = None) -> Optional[float]:
    return floor.cost_us(_floor_pairs(results, workload))


def _floor_text(results: Dict[str, Any]) -> str:
    cost = _floor_cost(results)
    if cost is None:
        return ""
    return f"; the kernel's perf-event signal alone costs {cost:.2f} µs here (median)"


def _base_text(index: Dict[Tuple[str, str], Dict[str, Any]]) -> str:
    walls = [
        s["base_wall_s"] for (w, _p), s in index.items() if w in workloads.CORE and s["base_wall_s"]
    ]
    if not walls:
        return "n/a"
    return f"{min(walls):.2f} to {max(walls):.2f} s of wall time"


def _load_text(machine: Dict[str, Any]) -> str:
    text = "at start " + " ".join(machine["loadavg_start"])
    if machine.get("loadavg_end"):
        text += ", at end " + " ".join(machine["loadavg_end"])
    samples = machine.get("loadavg_samples") or []
    if samples:
        text += f"; 1-min load during the run: median {statistics.median(samples):.2f}, "
        text += f"max {max(samples):.2f}"
    if machine.get("steal_s") is not None:
        text += f"; CPU time stolen by the hypervisor during the run: {machine['steal_s']:.1f} s"
    return text


def _code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def markdown(results: Dict[str, Any], image: Optional[str]) -> str:
    meta = results["meta"]
    machine = meta["machine"]
    index = _index(results)
    core = _workloads_of(results, "core")
    idle = _workloads_of(results, "idle")
    core_ids = _ordered_ids(index, _section_ids(results, "core"))
    idle_ids = _ordered_ids(index, _section_ids(results, "idle"))
    oop_ids = [
        p for p in core_ids + idle_ids if profilers.BY_ID[p].kind == profilers.OUT_OF_PROCESS
    ]
    oop_ids = list(dict.fromkeys(oop_ids))
    L: List[str] = []
    add = L.append

    add("# Benchmarks: samprof against other Python profilers")
    add("")
    add(
        "Written by `python -m benchmarks` from one run on the machine below; the figures are "
        "the harness's output, not edited by hand. To refresh them, run the command under "
        "*Reproduce*."
    )
    if meta["quick"]:
        add("")
        add(
            "**This is a `--quick` smoke run: one short pair per cell. Its figures are noise-"
            "dominated and say only that everything runs.**"
        )
    add("")
    add("## Machine")
    add("")
    add(
        _table(
            ["", ""],
            [
                ["CPU", machine["cpu"]],
                ["cores", str(machine["cores"])],
                ["memory", f"{machine['memory_gib']} GiB"],
                ["kernel", f"Linux {machine['kernel']} ({machine['os']})"],
                ["Python", f"{machine['python_impl']} {machine['python']}"],
                ["perf_event_paranoid", machine["perf_event_paranoid"] or "unknown"],
                ["load average", _load_text(machine)],
                [
                    "samprof",
                    f"{meta['samprof_version']}, commit {machine['git_commit'] or 'unknown'}"
                    + (" plus uncommitted changes in src/" if machine["git_src_dirty"] else ""),
                ],
                [
                    "run",
                    f"{meta['started']} to {meta.get('finished', '?')}, "
                    f"{meta.get('duration_s', 0) / 60:.0f} min",
                ],
            ],
        )
    )
    add("")
    add(
        "The machine is a shared virtual machine and noisy: the *no profiler* row of each "
        "table (an unprofiled run paired with another unprofiled run) shows how far two "
        "identical runs drift apart; differences smaller than its range mean nothing."
    )
    add("")
    add("## Reproduce")
    add("")
    add("```sh")
    add(meta["command"])
    add("```")
    add("")
    add(
        "From the repository root, with any Python 3.9+ as `python3`. The harness creates "
        "`.venv-bench/` with that interpreter, installs samprof into it with `pip install .` "
        "and the other profilers from PyPI, and re-runs itself there. Raw results go to "
        "`build/benchmarks/results.json`; `python -m benchmarks --report-only "
        "build/benchmarks/results.json --out ... --plot ...` rewrites this page from them. "
        "`python -m benchmarks --quick` is the short smoke run (samprof and cProfile only)."
    )
    add("")
    add("## Targets")
    add("")
    add(_table(["what", "target", "measured", "met"], targets(results)))
    add("")
    add(
        "CPU overhead is the median, over paired runs, of the workload's CPU time (all threads "
        "of the process, the profiler's own included) profiled divided by unprofiled. "
        "*noise* is the range of the same ratio for unprofiled-vs-unprofiled pairs of that "
        "workload."
    )
    add("")
    add("## How it measures")
    add("")
    add(
        f"Every measurement is a fresh Python process (`python -m benchmarks.child`). It sets "
        f"the workload up, starts the profiler, runs the workload (a fixed amount of work, "
        f"scale {meta['scale']:g}: {_base_text(index)} unprofiled here), stops the profiler, "
        f"and reports wall time (`time.perf_counter`) and CPU time (`time.process_time`) "
        f"around the workload, peak RSS (VmHWM) once the profiler has produced its result, "
        f"and the CPU time of each call group measured by the workload itself "
        f"(`time.thread_time` around every call). Out-of-process profilers (py-spy, austin) "
        f"run the child under their own command and sample it from outside; their own CPU is "
        f"what `wait4` reports for the profiler process minus what the child used. For each "
        f"cell the harness runs {meta['repeats']} pairs — an unprofiled run and a profiled "
        f"run back to back, alternating which goes first — and reports the median of the "
        f"per-pair ratios. A profiler more than {meta['slow_ratio']:g}× slower than the "
        f"baseline on the first pair gets {meta['slow_repeats']} pairs at most (its cost is "
        f"far outside the noise). Ratios below 2× are written as a percentage added (+1.2%), "
        f"above as a factor (×3.4)."
    )
    add("")
    add("Workloads:")
    add("")
    for name, description in results["workloads"].items():
        add(f"- **{name}**: {description}")
    add("")

    add("## CPU time overhead")
    add("")
    add(
        _grid(
            index,
            core + idle,
            core_ids + [p for p in idle_ids if p not in core_ids],
            lambda s: fmt_ratio(s["cpu"]),
        )
    )
    add("")
    add(
        "cProfile and pyinstrument profile only the thread that starts them, so on threaded-io "
        "they do not see the worker threads and cost almost nothing there. yappi profiles every "
        "thread. For py-spy and austin this is the target's own CPU; their process's CPU is "
        "under *Out-of-process profilers*."
    )
    add("")
    add("## Wall time overhead")
    add("")
    add(
        _grid(
            index,
            core + idle,
            core_ids + [p for p in idle_ids if p not in core_ids],
            lambda s: fmt_ratio(s["wall"]),
        )
    )
    add("")

    if oop_ids:
        add("## Out-of-process profilers")
        add("")
        add(
            "The target's own slowdown is the headline (tables above). The profiler's process "
            "uses CPU of its own, on another core if there is one; here it is as a share of the "
            "unprofiled workload's CPU time, with its peak RSS."
        )
        add("")
        rows = []
        for pid in oop_ids:
            for w in core + idle:
                s = index.get((w, pid))
                if s is None or s["n"] == 0:
                    continue
                rows.append(
                    [
                        _label(pid),
                        w,
                        fmt_ratio(s["cpu"]),
                        fmt_ratio(s["wall"]),
                        fmt_num(
                            None if s.get("tool_cpu_frac") is None else 100 * s["tool_cpu_frac"],
                            ".1f",
                            "%",
                        ),
                        fmt_num(s.get("tool_rss_mib"), ".1f", " MiB"),
                    ]
                )
        add(
            _table(
                [
                    "profiler",
                    "workload",
                    "target CPU",
                    "target wall",
                    "profiler process CPU",
                    "profiler process peak RSS",
                ],
                rows,
            )
        )
        add("")

    add("## Accuracy")
    add("")
    add(
        "Largest error, in percentage points, between the share of a call group in the profile "
        "and its share of the CPU time the workload measured itself (median over the profiled "
        "runs). Shares are taken over the call groups only, so time outside them (start-up, "
        "I/O waits, thread start and join) does not count. Wall-clock profilers are compared "
        "with CPU shares too: on the single-threaded workloads wall and CPU time coincide; on "
        "threaded-io waiting for the GIL inside a group counts for them and not for the CPU "
        "profilers. For cProfile and yappi the figure is the function's cumulative time, for "
        "pyinstrument the time of its frames, for samprof and zprofile the pprof `cpu` (or "
        "default) value, for py-spy (`--format raw`) and austin (collapsed stacks) the sample "
        "counts or times of the stacks that hold the function. A sampler's share carries "
        "statistical error: with n samples a share p has a standard error of "
        "sqrt(p(1−p)/n), about 3.5 pp for a 45% share at 200 samples (100 Hz for 2 s) and "
        "1.1 pp at 2,000."
    )
    add("")
    notes: Dict[str, int] = {}

    def acc(s: Dict[str, Any]) -> str:
        if s["accuracy_pp"] is not None:
            return f"{s['accuracy_pp']:.1f} pp"
        if s["accuracy_note"]:
            k = notes.setdefault(s["accuracy_note"], len(notes) + 1)
            return f"n/a [{k}]"
        return "n/a"

    acc_ids = [p for p in core_ids + idle_ids if p != "none"]
    add(_grid(index, core + idle, list(dict.fromkeys(acc_ids)), acc))
    add("")
    for note, k in notes.items():
        add(f"[{k}] {note}  ")
    add("")

    heap = _workloads_of(results, "heap")
    heap_ids = _ordered_ids(index, _section_ids(results, "heap"))
    if heap:
        add("## Heap profilers")
        add("")
        add(
            "The CPU overhead of heap profilers on an allocation-heavy workload and on *mixed*, "
            "with the same pairs as above, and the peak RSS each adds (MiB, median). samprof "
            "samples one allocation per `rate` bytes on average and follows sampled blocks "
            "until they are freed; tracemalloc records every allocation with its traceback "
            "(1 or 32 frames) and the result here is a snapshot taken at the end; memray "
            "records every allocation to a capture file. The *no profiler* row is the noise "
            "control of each workload. The *pass-through allocator hook* "
            "(`benchmarks/hook_floor.c`) is the floor under any profiler built on "
            "`PyMem_SetAllocator`: hooks on the same domains that only call the allocator "
            "below; what samprof costs above it is its own."
        )
        add("")
        ids = ["none"] + [p for p in heap_ids if p != "none"]
        add(_grid(index, heap, ids, lambda s: fmt_ratio(s["cpu"])))
        add("")
        add("Peak RSS added (MiB):")
        add("")
        add(_grid(index, heap, ids[1:], lambda s: fmt_num(s["rss_mib"], "+.1f")))
        add("")

    L += _web_section(results)

    add("## Peak RSS added")
    add("")
    add(
        "Peak RSS of the profiled process minus that of its unprofiled pair, in MiB (median). "
        "For out-of-process profilers this is the target only."
    )
    add("")
    add(
        _grid(
            index,
            core + idle,
            core_ids + [p for p in idle_ids if p not in core_ids],
            lambda s: fmt_num(s["rss_mib"], "+.1f"),
        )
    )
    add("")

    samprof_rows = []
    for (w, pid), s in index.items():
        sp = s.get("samprof")
        if not sp or pid == "samprof-cpu-10k-perf":
            continue
        samprof_rows.append(
            [
                _label(pid),
                w,
                ", ".join(sp["engines"]),
                fmt_num(sp["effective_hz"], ".0f"),
                fmt_num(sp["samples"], ".0f"),
                fmt_num(sp["samples_per_wall_s"], ".0f"),
                fmt_num(sp["dropped"], ".0f")
                + (f" ({', '.join(sp['dropped_kinds'])})" if sp["dropped_kinds"] else ""),
                fmt_num(sp["truncated"], ".0f"),
                fmt_num(sp["start_ms"], ".1f"),
                fmt_num(sp["stop_ms"], ".1f"),
                fmt_num(sp["profile_kib"], ".1f"),
            ]
        )
    if samprof_rows:
        add("## samprof's own statistics")
        add("")
        add(
            "From `stats` after `stop()` (medians over the profiled runs): the engine that ran, "
            "`effective_hz` (for CPU mode the rate signals arrived at per CPU-second), samples "
            "taken, samples per second of the workload's wall time (all threads together: a "
            "single busy thread sampled at the full rate gives about the rate), samples "
            "dropped and stacks truncated, and how long `start()` and `stop()` took (not "
            "included in the overhead figures)."
        )
        add("")
        add(
            _table(
                [
                    "profiler",
                    "workload",
                    "engine",
                    "effective Hz",
                    "samples",
                    "samples per s of workload wall time",
                    "dropped",
                    "truncated",
                    "start ms",
                    "stop ms",
                    "profile KiB",
                ],
                samprof_rows,
            )
        )
        add("")

    add("## Cost per sample")
    add("")
    add(
        "A recursion of the given depth spinning in a loop at its leaf, under samprof CPU at "
        "10 kHz with the perf engine, against the same run unprofiled: (profiled CPU − "
        "unprofiled CPU) / samples, median over pairs. The CPU includes samprof's collector "
        "thread, so this is the whole cost of a sample: signal delivery, the stack walk, and "
        "aggregation."
    )
    add("")
    rows = []
    for depth in workloads.DEPTHS:
        s = index.get((f"depth-{depth}", "samprof-cpu-10k-perf"))
        if s is None:
            continue
        sp = s.get("samprof")
        if s["n"] == 0 or not sp:
            rows.append([str(depth), "error" if s["errors"] else "n/a", "", "", "", ""])
            continue
        floor_us = _floor_cost(results, f"depth-{depth}")
        own = None if sp["cost_us"] is None or floor_us is None else sp["cost_us"] - floor_us
        rows.append(
            [
                str(depth),
                fmt_num(sp["cost_us"], ".2f", " µs"),
                fmt_num(floor_us, ".2f", " µs"),
                fmt_num(own, ".2f", " µs"),
                fmt_ratio(s["cpu"]),
                fmt_num(sp["samples"], ".0f"),
                fmt_num(sp["effective_hz"], ".0f"),
                ", ".join(sp["engines"]),
            ]
        )
    if rows:
        add(
            _table(
                [
                    "stack depth",
                    "cost per sample",
                    "kernel floor beside it",
                    "cost − floor",
                    "CPU overhead",
                    "samples",
                    "effective Hz",
                    "engine",
                ],
                rows,
            )
        )
    else:
        add("Not measured in this run.")
    add("")
    fl = results.get("floor")
    all_floor = _floor_pairs(results)
    if fl and all_floor:
        q1, q3 = floor.cost_quartiles(all_floor) or (0.0, 0.0)
        signals = statistics.median(sig["signals"] for _, sig in all_floor)
        add(
            f"Kernel floor: `benchmarks/signal_floor.c` opens the same per-thread perf task-clock "
            f"event as samprof, routes its overflow signal the same way and re-arms it from the "
            f"handler the same way (`PERF_EVENT_IOC_REFRESH`), with a handler that does nothing "
            f"else, and spins in C. One pair of it (without and with the event at "
            f"{1e9 / fl['period_ns']:.0f} Hz) runs right after each pair above, so both see the "
            f"same machine. It took {signals:.0f} signals per run and "
            f"**{_floor_cost(results):.2f} µs of CPU per signal** (median of {len(all_floor)} "
            f"pairs, middle half {q1:.2f} to {q3:.2f} µs): what this machine's kernel (a "
            f"virtual machine) charges for the timer overflow, the signal delivery, the re-arm "
            f"and the return, before any profiler code runs. *cost − floor* is therefore "
            f"samprof's own part; where the two are close the noise decides its sign."
        )
    elif fl and fl.get("error"):
        add(f"Kernel floor: not measured ({fl['error']}).")
    add("")

    add("## Memory during a long profile")
    add("")
    mem = memory_figures(results)
    if mem is None:
        add("Not measured in this run.")
    elif "error" in mem:
        add(f"The run failed: `{mem['error'][:400]}`")
    else:
        add(
            f"The call-heavy and mixed groups in turn for {mem['seconds']:g} s, unprofiled and "
            f"under samprof CPU at 100 Hz, the two processes side by side. Peak RSS: "
            f"{mem['base_mib']:.1f} MiB unprofiled, {mem['prof_mib']:.1f} MiB profiled, "
            f"**{mem['added_mib']:+.1f} MiB** added. RSS grew by {mem['growth_base_mib']:.1f} "
            f"MiB (unprofiled) and {mem['growth_prof_mib']:.1f} MiB (profiled) between the "
            f"start of the workload and its end. The profile held "
            f"{fmt_num(mem['samples'], '.0f')} samples ({mem['engine']} engine) and came to "
            f"{mem['profile_kib']:.1f} KiB gzipped."
        )
    add("")

    add("## Overhead against sampling rate")
    add("")
    if image:
        add(f"![CPU overhead against sampling rate]({image})")
        add("")
    rows = []
    for _series, ids, _color, tool in RATE_SERIES:
        for pid in ids:
            spec = profilers.BY_ID[pid]
            cells = [index.get((w, pid)) for w in RATE_WORKLOADS_DOC]
            if all(c is None for c in cells):
                continue
            row = [_label(pid), f"{spec.rate_hz}"]
            for c in cells:
                row.append(_cell_text(c, lambda s: fmt_ratio(s["cpu"])))
                if tool and c is not None:
                    row[-1] += (
                        " (own process "
                        + fmt_num(
                            None
                            if c is None or c.get("tool_cpu_frac") is None
                            else 100 * c["tool_cpu_frac"],
                            ".1f",
                            "%",
                        )
                        + ")"
                    )
            rows.append(row)
    if rows:
        add(
            _table(
                ["profiler", "rate (Hz)"] + [f"CPU overhead, {w}" for w in RATE_WORKLOADS_DOC], rows
            )
        )
    add("")
    add(
        "pyinstrument's rate is the inverse of its interval; it samples wall-clock time of the "
        "thread that started it. samprof CPU above the kernel tick rate needs the perf engine "
        "(the effective rate is in *samprof's own statistics*)."
    )
    add("")

    add("## Profilers that could not be measured, and failures")
    add("")
    errors = _errors_section(results)
    add("\n".join(errors) if errors else "None: every profiler installed and ran.")
    add("")
    add("Versions measured:")
    add("")
    for family, info in meta["available"].items():
        if info["ok"] and family != "none":
            add(f"- {family}: {info['version']}")
    add("")

    add("## What we did not measure and why")
    add("")
    for item in NOT_MEASURED:
        add(f"- {item}")
    add("")
    return "\n".join(L)


def _web_cells(results: Dict[str, Any]) -> List[Tuple[str, str, Dict[str, Any]]]:
    """(app, variant, figures) of every web cell, in the order measured."""
    return [
        (cell["app"], cell["variant"], summarize_web(cell["pairs"]))
        for cell in (results.get("web") or {}).get("cells", [])
    ]


def _web_section(results: Dict[str, Any]) -> List[str]:
    info = results.get("web")
    if not info or (not info["cells"] and not info["unavailable"]):
        return []
    L = ["## Web middleware: cost per request", ""]
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    L.append(
        f"A small application answers `/items/{info['items']}` (a JSON page of "
        f"{info['items']} rows, built with a few function calls per row) on loopback, "
        f"under a real server: "
        + " and ".join(info["apps"].values())
        + f". A client in the harness sends {info['requests']} requests one after another, "
        f"each on a new connection, after 30 to warm up; the *CPU per request* is the serving "
        f"process's CPU time over them (every thread, the profiler's included, read through "
        f"the application's `/_cpu` route before and after), the latency the client's mean. "
        f"Each variant is paired with the bare application as in the tables above (median of "
        f"the per-pair ratios; *range* is their smallest and largest); *no middleware* "
        f"against itself is the noise. Files are written when the server stops, outside the "
        f"measured requests (every 60 s by default in a long-running server). "
        f"Versions: {versions}."
    )
    L.append("")
    for what in info["variants"].values():
        L.append(f"- **{what['label']}**: {what['description']}")
    L.append("")
    cells = _web_cells(results)
    for app, what in info["apps"].items():
        rows = []
        for cell_app, variant_id, s in cells:
            if cell_app != app:
                continue
            label = info["variants"][variant_id]["label"]
            if s["n"] == 0:
                rows.append([label, "error", "", "", "", "", ""])
                continue
            lo, hi = s["cpu_range"]
            rows.append(
                [
                    label,
                    f"{s['cpu_us']:.0f} µs",
                    f"{s['added_cpu_us']:+.0f} µs",
                    fmt_ratio(s["cpu"]),
                    f"{fmt_ratio(lo)} to {fmt_ratio(hi)}",
                    fmt_ratio(s["latency"]) + f" ({s['latency_us']:.0f} µs)",
                    f"{s['response_bytes'] / 1024:.1f} KiB",
                ]
            )
        if not rows:
            continue
        L.append(f"**{what}**, unprofiled about {_web_base(cells, app):.0f} µs of CPU per request:")
        L.append("")
        L.append(
            _table(
                [
                    "variant",
                    "CPU per request",
                    "added",
                    "CPU overhead",
                    "range",
                    "latency overhead (mean)",
                    "response",
                ],
                rows,
            )
        )
        L.append("")
    for what, why in info["unavailable"].items():
        L.append(f"Not measured: {what}: {why}  ")
    for app, variant_id, s in cells:
        for error in s["errors"][:1]:
            L.append(f"Failed: {app} / {variant_id}: `{_one_line(error, 300)}`  ")
    L.append("")
    return L


def _web_base(cells: List[Tuple[str, str, Dict[str, Any]]], app: str) -> float:
    bases = [s["base_cpu_us"] for a, _v, s in cells if a == app and s["n"]]
    return statistics.median(bases) if bases else 0.0


RATE_WORKLOADS_DOC = ["call-heavy", "mixed"]

NOT_MEASURED = [
    "**Other Python versions.** One run measures one interpreter (the one named above); "
    "`--python` runs the same harness on another. The frame layouts samprof walks differ "
    "between 3.9 and 3.13, so costs can differ too.",
    "**Multi-core scaling.** The machine has 2 cores; threaded-io and the idle-thread runs "
    "show GIL-bound threads, not several busy processes or free-threaded builds.",
    "**Real applications.** The workloads are synthetic and small (a few hundred distinct "
    "stacks). A web service with thousands of distinct stacks stresses samprof's stack table "
    "and symbol cache more than these do; the 60 s memory run is the closest we come.",
    "**Labels, HTTP endpoints.** `samprof.labels` blocks (timed with timeit in the README) "
    "and the HTTP server are not benchmarked here; the web middleware is, on one small "
    "application, one request at a time (concurrent load on a 2-core machine mostly "
    "measures the client).",
    "**cProfile and pyinstrument on other threads.** They profile the thread that started "
    "them; making them follow every thread (threading.setprofile) is not how they are used, "
    "so threaded-io shows them blind to the worker threads instead.",
    "**Scalene, ddtrace, Tachyon.** Scalene is a whole-program runner with its own "
    "launcher, ddtrace needs an agent, Tachyon needs Python 3.15; none fits the one-process "
    "harness. (memray runs in-process, through its Tracker, beside the heap profilers.)",
    "**zprofile's wall mode.** It is pure Python, main thread only; its CPU profiler is "
    "measured. zprofile also profiles for a fixed duration with no way to stop early, so the "
    "harness asks it for twice the unprofiled run time and waits for the rest after the "
    "workload (outside the measured window).",
    "**Overhead of attaching.** py-spy and austin start the target themselves (`py-spy "
    "record -- python ...`), so the cost of attaching to a running process with `--pid` is "
    "not measured; the workload's clocks start after the interpreter is up either way.",
    "**The profiler process's memory in detail.** For py-spy and austin we give the peak RSS "
    "of their process (VmHWM, polled every 50 ms), not the target's page cache or the "
    "kernel memory ptrace uses.",
    "**Accuracy of the deterministic profilers' own overhead.** cProfile and yappi inflate "
    "every call; their shares are compared with what the workload measured under them, not "
    "with an unprofiled run.",
]
