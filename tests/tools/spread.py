"""Summarizes the errors the statistical tests logged (SAMPROF_SPREAD_LOG,
see tests/support/measure.py): per test and comparison, min/median/max of the
signed error and of its magnitude, against the tolerance.

Usage: python spread.py LOG_FILE
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def main() -> None:
    groups = defaultdict(list)
    tol = {}
    with open(sys.argv[1]) as f:
        for line in f:
            r = json.loads(line)
            key = (r["test"], r["what"])
            groups[key].append(r["error"])
            tol[key] = (r["tol"], r["unit"])
    for (test, what), errors in sorted(groups.items()):
        mags = sorted(abs(e) for e in errors)
        t, unit = tol[(test, what)]
        bound = "floor" if unit == "floor" else f"tol {t:g}{'%' if unit == '%' else ''}"
        print(
            f"{test} | {what}: n={len(errors)}, error min/median/max "
            f"{min(errors):+.3g}/{statistics.median(errors):+.3g}/{max(errors):+.3g}, "
            f"|error| median/max {statistics.median(mags):.3g}/{mags[-1]:.3g}, {bound}"
        )


if __name__ == "__main__":
    main()
