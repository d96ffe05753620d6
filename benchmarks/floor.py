"""The kernel's share of a sample: signal_floor.c, compiled and run in pairs.

The cost per sample samprof pays includes the perf event's overflow, the
signal delivery and the re-arm, which no handler can avoid; measuring that
alone tells how much of the cost is samprof's own. The harness runs one
pair (no event, then the event at 10 kHz, or the reverse) right after each
pair of the cost-per-sample runs, so both see the same state of a noisy
machine. Needs a C compiler
(samprof's build needs one anyway).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sysconfig
from typing import Any, Dict, List, Optional

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "signal_floor.c")
PERIOD_NS = 100_000  # 10 kHz, the rate of the cost-per-sample runs
FULL_ITERATIONS = 1_600_000_000  # about 1 s of CPU here

Pair = List[Dict[str, Any]]


def find_compiler() -> str:
    configured = (sysconfig.get_config_var("CC") or "").split()
    for candidate in configured[:1] + ["cc", "gcc", "clang"]:
        if candidate and shutil.which(candidate):
            return candidate
    raise RuntimeError("no C compiler found (tried CC, cc, gcc, clang)")


class Floor:
    """Builds signal_floor once, then runs pairs of it. ``error`` is set
    (and pair() returns None) when it cannot be built or run."""

    def __init__(self, workdir: str, scale: float) -> None:
        self.binary = os.path.join(workdir, "signal_floor")
        self.iterations = max(1, int(FULL_ITERATIONS * scale))
        self.error: Optional[str] = None
        self.count = 0
        try:
            os.makedirs(workdir, exist_ok=True)
            compiler = find_compiler()
            build = subprocess.run(
                [compiler, "-O1", "-o", self.binary, SOURCE], capture_output=True, text=True
            )
            if build.returncode != 0:
                raise RuntimeError(f"{compiler} failed: {build.stderr.strip()[-500:]}")
        except (OSError, RuntimeError) as e:
            self.error = str(e)

    def _run(self, period_ns: int) -> Dict[str, Any]:
        done = subprocess.run(
            [self.binary, str(period_ns), str(self.iterations)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip() or f"exit status {done.returncode}")
        return json.loads(done.stdout)

    def pair(self) -> Optional[Pair]:
        """[without the event, with it], run in alternating order."""
        if self.error is not None:
            return None
        order = [0, PERIOD_NS] if self.count % 2 == 0 else [PERIOD_NS, 0]
        self.count += 1
        try:
            runs = {p: self._run(p) for p in order}
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            self.error = str(e)
            return None
        return [runs[0], runs[PERIOD_NS]]


def _costs(pairs: List[Pair]) -> List[float]:
    """CPU µs per signal of each pair."""
    return [
        (sig["cpu_s"] - base["cpu_s"]) / sig["signals"] * 1e6
        for base, sig in pairs
        if sig["signals"]
    ]


def cost_us(pairs: List[Pair]) -> Optional[float]:
    """Median CPU µs per signal over ``pairs``; None without pairs."""
    costs = _costs(pairs)
    return statistics.median(costs) if costs else None


def cost_quartiles(pairs: List[Pair]) -> Optional[List[float]]:
    """First and third quartiles of the CPU µs per signal over ``pairs``."""
    costs = _costs(pairs)
    if len(costs) < 2:
        return [costs[0], costs[0]] if costs else None
    q = statistics.quantiles(costs, n=4)
    return [q[0], q[2]]
