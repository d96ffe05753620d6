"""samprof.continuous in whole processes, configured by environment
variables only: the last part sent at exit and on SIGTERM, within the
exit timeout when the backend hangs; an agent per forked process (a
fork, gunicorn's pre-forked workers), each with its own pid label; and
``samprof serve --push``."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Dict, List

import pytest
from support import SCRIPTS
from support.httpclient import get
from support.processes import child_env, describe, last_json, run_script
from support.pyroscope import Receiver, Upload, value_of
from support.servers import GUNICORN_LISTENING, running

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds


def push_env(receiver: Receiver, **settings: str) -> Dict[str, str]:
    env = {name: "" for name in os.environ if name.startswith("SAMPROF_PUSH_")}
    env.update({"SAMPROF_PUSH_URL": receiver.url, "SAMPROF_PUSH_APP": "job"})
    env.update({f"SAMPROF_PUSH_{k.upper()}": v for k, v in settings.items()})
    return child_env(env)


def by_pid(uploads: List[Upload]) -> Dict[int, List[Upload]]:
    out: Dict[int, List[Upload]] = {}
    for u in uploads:
        out.setdefault(int(u.labels["pid"]), []).append(u)
    return out


def cpu_of(uploads: List[Upload], function: str, **labels: str) -> int:
    return value_of(uploads, "cpu", function, **labels)


def test_the_last_part_is_sent_at_exit():
    with Receiver() as receiver:
        proc = run_script(
            "push_app.py", "0.4", env=push_env(receiver, interval="60", profiles="cpu")
        )
        report = last_json(proc.stdout)
    [upload] = receiver.uploads
    assert upload.labels["pid"] == str(report["pid"])
    assert upload.labels["service_name"] == "job"
    # The one part spans the program's run, and holds its work.
    assert 0.4e9 <= upload.until_ns - upload.from_ns < 10e9
    assert cpu_of([upload], "work") > 0.5 * report["cpu"] * 1e9


def test_exit_is_bounded_when_the_backend_hangs():
    with Receiver() as receiver:
        receiver.hang.set()
        env = push_env(receiver, interval="60", profiles="cpu", timeout="30", exit_timeout="1")
        proc = run_script("push_app.py", "0.2", env=env)
        took = time.time() - last_json(proc.stdout)["ended"]
    assert not receiver.uploads
    # The upload may take 1 s; the interpreter's own exit adds little.
    assert 1 <= took < 2.5, f"the process took {took:.1f} s to exit"


def test_sigterm_sends_the_last_part_and_still_kills():
    with Receiver() as receiver:
        env = push_env(receiver, interval="60", profiles="cpu,heap")
        proc = run_script("push_app.py", "0.3", "sigterm", env=env, check=False)
        assert proc.returncode == -signal.SIGTERM, describe(proc)
    assert sorted(u.name for u in receiver.uploads) == ["memory", "process_cpu"]


def test_a_forked_child_runs_its_own_agent():
    with Receiver() as receiver:
        proc = run_script(
            "push_app.py", "0.4", "fork", env=push_env(receiver, interval="0.2", profiles="cpu")
        )
    pids = {json.loads(line)["pid"] for line in proc.stdout.splitlines() if line.startswith("{")}
    assert len(pids) == 2
    uploads = by_pid(receiver.of("process_cpu"))
    assert set(uploads) == pids
    for pid, parts in uploads.items():
        assert cpu_of(parts, "work") > 0, pid
        spans = sorted((u.from_ns, u.until_ns) for u in parts)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans


def test_gunicorn_preloaded_workers_each_push_with_their_pid(tmp_path):
    with Receiver() as receiver:
        env = push_env(receiver, interval="0.5", profiles="cpu", app="shop.web")
        args = [sys.executable, "-m", "gunicorn", "-w", "2", "--preload", "-b", "127.0.0.1:0"]
        args += ["--chdir", SCRIPTS, "--graceful-timeout", "10", "push_wsgi_app:app"]
        with running(args, str(tmp_path), env) as server:
            [listening] = server.wait_for(GUNICORN_LISTENING)
            port = int(listening.group(1))
            for i in range(60):
                assert get(port, f"/work/{i}")[0] == 200
            server.proc.send_signal(signal.SIGTERM)
            assert server.finish() == 0, "".join(server.stderr)
            master = server.proc.pid
    uploads = by_pid(receiver.of("process_cpu"))
    workers = {pid: parts for pid, parts in uploads.items() if pid != master}
    assert master in uploads and len(workers) == 2, sorted(uploads)
    handled = 0
    for parts in workers.values():
        # The handler runs after the app named its route.
        handled += cpu_of(parts, "handle_work", route="/work/{n}")
        assert cpu_of(parts, "handle_work") == cpu_of(parts, "handle_work", route="/work/{n}")
    # 60 requests of 20 ms: the workers' parts hold about 1.2 s of it.
    assert 0.6e9 < handled < 2.4e9, handled


def test_samprof_serve_push(tmp_path):
    with Receiver() as receiver:
        env = push_env(receiver, interval="0.2", profiles="cpu,heap")
        env.pop("SAMPROF_PUSH_URL")
        cmd = [sys.executable, "-m", "samprof", "serve", "--listen", "127.0.0.1:0"]
        cmd += ["--push", receiver.url, "--", os.path.join(SCRIPTS, "push_app.py"), "0.4"]
        with running(cmd, str(tmp_path), env) as proc:
            assert proc.finish() == 0, "".join(proc.stderr)
        assert any("sending cpu, heap profiles of job to" in line for line in proc.stderr)
    names = {u.name for u in receiver.uploads}
    assert names == {"process_cpu", "memory"}
    assert cpu_of(receiver.of("process_cpu"), "work") > 0
