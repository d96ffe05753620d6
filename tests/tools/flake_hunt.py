"""Runs the test suite N times and reports, per test, how many runs it
failed and how it failed first.

Usage: python flake_hunt.py N OUT_DIR -- PYTEST_COMMAND...

`make flake-hunt N=10 [PYTHON=...] [SANITIZE=1] [PYTEST_ARGS=...]` calls
this with the right virtual environment and environment variables. Each
run writes OUT_DIR/run-K.xml (JUnit XML) and OUT_DIR/run-K.log; the
summary is printed and written to OUT_DIR/summary.txt. Exits 1 when any
test failed in any run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from typing import Dict, List, Tuple


def _failures(xml_path: str) -> Tuple[int, List[Tuple[str, str]]]:
    """(tests run, [(test id, first line of the failure)]) from JUnit XML."""
    root = ET.parse(xml_path).getroot()
    ran = 0
    failed = []
    for case in root.iter("testcase"):
        ran += 1
        cls = case.get("classname", "").replace(".", "/")
        test_id = f"{cls}.py::{case.get('name')}"
        for tag in ("failure", "error"):
            el = case.find(tag)
            if el is not None:
                message = (el.get("message") or el.text or tag).strip().splitlines()
                failed.append((test_id, message[0][:300] if message else tag))
    return ran, failed


def main() -> int:
    n = int(sys.argv[1])
    out = sys.argv[2]
    assert sys.argv[3] == "--", "usage: flake_hunt.py N OUT_DIR -- PYTEST_COMMAND..."
    command = sys.argv[4:]
    os.makedirs(out, exist_ok=True)
    failed_runs: Dict[str, List[int]] = {}
    first: Dict[str, str] = {}
    totals = []
    for k in range(1, n + 1):
        xml = os.path.join(out, f"run-{k}.xml")
        log = os.path.join(out, f"run-{k}.log")
        t0 = time.monotonic()
        with open(log, "w") as f:
            status = subprocess.call(
                [*command, f"--junitxml={xml}"], stdout=f, stderr=subprocess.STDOUT
            )
        took = time.monotonic() - t0
        if not os.path.exists(xml):
            print(f"run {k}: pytest exited {status} without a report; see {log}", flush=True)
            failed_runs.setdefault("(whole run)", []).append(k)
            first.setdefault("(whole run)", f"exit status {status}")
            continue
        ran, failed = _failures(xml)
        totals.append(took)
        for test_id, message in failed:
            failed_runs.setdefault(test_id, []).append(k)
            first.setdefault(test_id, f"run {k}: {message}")
        print(
            f"run {k}/{n}: {ran} tests, {len(failed)} failed, {took:.0f}s"
            + "".join(f"\n  FAILED {t}" for t, _ in failed),
            flush=True,
        )
    lines = [f"flake hunt: {n} runs of {' '.join(command)}"]
    if totals:
        lines.append(f"run time: min {min(totals):.0f}s, max {max(totals):.0f}s")
    if not failed_runs:
        lines.append("no test failed in any run")
    for test_id, runs in sorted(failed_runs.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"{len(runs)}/{n} failed: {test_id}\n    first: {first[test_id]}")
    summary = "\n".join(lines)
    print(summary)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(summary + "\n")
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
