"""The benchmark environment: a virtual environment of its own.

The C core must be built for the interpreter that runs the measurements, and
the peers must be installed for it, so the harness makes a virtual
environment (``.venv-bench`` at the repository root by default), installs
the repository into it with ``pip install .`` and the peers one by one, and
re-runs itself there. A peer that does not install, or installs but does not
run, is recorded with the error and later shown in the report; nothing is
dropped silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

# (name, pip requirements to try in turn, how to check it runs). The family
# names match profilers.Spec.family; "matplotlib" is for --plot.
PEERS: List[Dict[str, Any]] = [
    {"name": "yappi", "requirements": ["yappi"], "check": ["-c", "import yappi"]},
    {
        "name": "pyinstrument",
        "requirements": ["pyinstrument"],
        "check": ["-c", "import pyinstrument"],
    },
    {"name": "py-spy", "requirements": ["py-spy"], "tool": "py-spy"},
    # austin-dist 4.0.0's manylinux wheel holds a binary linked against a
    # newer glibc than its tag says; the 3.x series is the fallback.
    {"name": "austin", "requirements": ["austin-dist", "austin-dist<4"], "tool": "austin"},
    # zprofile's generated protobuf module predates protobuf 4; with a newer
    # protobuf it fails at import.
    {
        "name": "zprofile",
        "requirements": ["zprofile", "zprofile protobuf<3.21"],
        "check": ["-c", "import zprofile.cpu_profiler"],
    },
    {"name": "memray", "requirements": ["memray"], "check": ["-c", "import memray"]},
]
# The web benchmark's servers and frameworks (werkzeug comes with Flask).
WEB_PEER = {
    "name": "web",
    "requirements": ["flask gunicorn starlette uvicorn"],
    "check": ["-c", "import flask, gunicorn, starlette, uvicorn"],
}
PLOT_PEER = {
    "name": "matplotlib",
    "requirements": ["matplotlib"],
    "check": ["-c", "import matplotlib"],
}

REPORT_FILE = "bench-install.json"


def in_venv(venv: str) -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(venv)


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def _pip(venv: str, args: List[str], log_path: str) -> subprocess.CompletedProcess:
    command = [venv_python(venv), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    if args[:1] == ["install"]:
        # Byte-compiling every installed module (matplotlib's, the web
        # frameworks') is most of an install's time; runs compile what they
        # import.
        args = ["install", "--no-compile"] + args[1:]
    done = subprocess.run(command + args, capture_output=True, text=True)
    with open(log_path, "a") as log:
        log.write(f"$ pip {' '.join(args)}\n{done.stdout}{done.stderr}\n")
    return done


def _error_text(done: subprocess.CompletedProcess, limit: int = 600) -> str:
    lines = [
        line
        for line in (done.stderr + done.stdout).splitlines()
        if line.strip() and "is ignored: it is neither a file nor a directory" not in line
    ]
    text = "\n".join(lines[-8:])
    return text[-limit:] if len(text) > limit else text


def _check(venv: str, peer: Dict[str, Any]) -> Optional[str]:
    """None if the peer runs, else why not."""
    if "tool" in peer:
        tool = os.path.join(venv, "bin", peer["tool"])
        if not os.access(tool, os.X_OK):
            return f"{peer['tool']}: no executable in {os.path.join(venv, 'bin')}"
        command = [tool, "--version"]
    else:
        command = [venv_python(venv)] + peer["check"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{' '.join(command)}: {e}"
    if done.returncode != 0:
        return f"`{os.path.basename(command[0])} {' '.join(command[1:])}` failed: " + _error_text(
            done
        )
    return None


def _installed_version(venv: str, requirement: str) -> str:
    """ "name version" of the first distribution in ``requirement``."""
    dist = requirement.split()[0].split("<")[0].split(">")[0].split("=")[0]
    done = subprocess.run(
        [
            venv_python(venv),
            "-c",
            "import sys; from importlib import metadata; print(metadata.version(sys.argv[1]))",
            dist,
        ],
        capture_output=True,
        text=True,
    )
    return f"{dist} {done.stdout.strip()}" if done.returncode == 0 else dist


def install_peer(venv: str, peer: Dict[str, Any], log_path: str) -> Dict[str, Any]:
    """Install one peer, trying its requirements in turn (each a
    space-separated list of pip requirements); returns
    {name, ok, installed, attempts: [{requirement, error}]}."""
    record: Dict[str, Any] = {"name": peer["name"], "ok": False, "attempts": []}
    for requirement in peer["requirements"]:
        done = _pip(venv, ["install", "--quiet"] + requirement.split(), log_path)
        if done.returncode != 0:
            error = "pip install failed: " + _error_text(done)
        else:
            error = _check(venv, peer)
        record["attempts"].append({"requirement": requirement, "error": error})
        if error is None:
            record["ok"] = True
            record["installed"] = _installed_version(venv, requirement)
            break
    return record


def prepare(
    venv: str,
    base_python: str,
    source: str,
    peers: List[Dict[str, Any]],
    log: Callable[[str], None],
) -> None:
    """Create ``venv`` if needed, install samprof from ``source`` (always,
    so the measured build is the current one) and ``peers``; write the
    install report into the venv. Exits if samprof itself cannot be
    installed."""
    log_path = os.path.join(venv, "bench-install.log")
    if not os.path.exists(venv_python(venv)):
        log(f"creating {venv} with {base_python}")
        subprocess.run([base_python, "-m", "venv", venv], check=True)
    t0 = time.perf_counter()
    log(f"installing samprof from {source} (pip install .)")
    done = _pip(venv, ["install", "--quiet", "--force-reinstall", "--no-deps", source], log_path)
    if done.returncode != 0:
        sys.exit(f"error: pip install of samprof failed (log: {log_path}):\n{_error_text(done)}")
    previous: Dict[str, Any] = {}
    report_path = os.path.join(venv, REPORT_FILE)
    if os.path.exists(report_path):
        with open(report_path) as f:
            previous = {r["name"]: r for r in json.load(f).get("peers", [])}
    records = []
    for peer in peers:
        old = previous.get(peer["name"])
        # Reinstalling a peer that already runs would only repeat the same
        # answer (and, for austin, the failed first attempt).
        if old is not None and old.get("ok") and _check(venv, peer) is None:
            records.append(old)
            continue
        log(f"installing {peer['name']}")
        record = install_peer(venv, peer, log_path)
        if not record["ok"]:
            log(f"  {peer['name']} unavailable: {record['attempts'][-1]['error']}")
        records.append(record)
    for name, old in previous.items():
        if name not in {r["name"] for r in records}:
            records.append(old)
    with open(report_path, "w") as f:
        json.dump({"peers": records}, f, indent=1)
    log(f"environment ready in {time.perf_counter() - t0:.0f} s")


def install_report(venv: str) -> Dict[str, Dict[str, Any]]:
    """The peers' install records, by name (empty if none were installed)."""
    path = os.path.join(venv, REPORT_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {r["name"]: r for r in json.load(f).get("peers", [])}
