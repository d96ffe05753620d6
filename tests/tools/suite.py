"""Runs the test suite in two passes: first every test that does not
measure accuracy, JOBS at a time (pytest-xdist), then the accuracy tests
(marker ``accuracy``, tests/support/measure.py) one at a time, so that
nothing else competes with them for the CPU while they compare samples with
measured time.

Usage: python suite.py JOBS [PYTEST_ARGS...]

The make targets that run tests call this with their virtual environment's
python. PYTEST_ARGS go to both passes; a ``--junitxml=PATH`` among them gets
one report holding both passes. A pass that selects nothing (pytest's exit
status 5) is not a failure unless neither selected anything. Exits with the
first failing pass's status; the second pass runs even when the first
failed, so one run reports every failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from typing import List, Optional

NO_TESTS = 5  # pytest's exit status when nothing was selected


def _merge_junit(parts: List[str], out: str) -> None:
    root = ET.Element("testsuites")
    for path in parts:
        if not os.path.exists(path):
            continue
        part = ET.parse(path).getroot()
        suites = [part] if part.tag == "testsuite" else list(part)
        root.extend(suites)
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)


def main() -> int:
    jobs = int(sys.argv[1])
    args = sys.argv[2:]
    junit: Optional[str] = None
    for a in list(args):
        if a.startswith("--junitxml="):
            junit = a.split("=", 1)[1]
            args.remove(a)
    # worksteal: a worker that runs out of tests takes some from another's
    # queue, so one long test near the end does not leave a CPU idle.
    parallel = ["-n", str(jobs), "--dist", "worksteal"] if jobs > 1 else ["-p", "no:xdist"]
    passes = [
        ["-m", "not accuracy", *parallel],
        ["-m", "accuracy", "-p", "no:xdist"],
    ]
    statuses = []
    with tempfile.TemporaryDirectory(prefix="samprof-suite-") as tmp:
        reports = []
        for k, selection in enumerate(passes):
            extra = []
            if junit:
                reports.append(os.path.join(tmp, f"pass-{k}.xml"))
                extra = [f"--junitxml={reports[-1]}"]
            what = " ".join(selection)
            print(f"--- pytest {what} {' '.join(args)}", flush=True)
            command = [sys.executable, "-m", "pytest", *selection, *extra, *args]
            statuses.append(subprocess.call(command))
        if junit:
            _merge_junit(reports, junit)
    failed = [s for s in statuses if s not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(s == NO_TESTS for s in statuses) else 0


if __name__ == "__main__":
    sys.exit(main())
