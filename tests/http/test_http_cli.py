"""`samprof serve`: a program run with the /debug/pprof endpoints on and no
change to its code; every process forked from it serves on a port of its
own (gunicorn's workers, os.fork), found through the discovery files."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from typing import Iterator, List

import pytest
from support import SCRIPTS
from support.httpclient import assert_go_error, get
from support.processes import run_samprof, samprof_env
from support.profiles import go_pprof_files
from support.servers import GUNICORN_LISTENING, Running, running

from samprof import http

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds

SERVES = re.compile(r"samprof: pid (\d+) serves (http://127\.0\.0\.1:(\d+)/debug/pprof/)")


@contextlib.contextmanager
def samprof_serve(*args: str, cwd: str) -> Iterator[Running]:
    """Runs `python -m samprof serve ARGS`, bounded (support/servers.py)."""
    with running([sys.executable, "-m", "samprof", "serve", *args], cwd, samprof_env()) as r:
        yield r


@pytest.fixture(autouse=True)
def discovery(tmp_path, monkeypatch):
    """Each test's processes write their discovery files in a directory of
    its own."""
    path = tmp_path / "discovery"
    monkeypatch.setenv("SAMPROF_DISCOVERY_DIR", str(path))
    return path


def listening_holders(port: int) -> List[int]:
    """The pids that hold a socket listening on 127.0.0.1:port (from
    /proc/net/tcp and each process's descriptors)."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.split(":")[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{inode}]")
    holders = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                holders.append(int(pid))
        except OSError:
            continue
    return holders


def test_serve_runs_a_script_with_the_endpoints_on(tmp_path, discovery):
    stop = tmp_path / "stop"
    with samprof_serve(
        "--listen", "127.0.0.1:0", "--", os.path.join(SCRIPTS, "serve_forks.py"), str(stop),
        cwd=str(tmp_path),
    ) as served:  # fmt: skip
        found = served.wait_for(SERVES, 3)
        pids = [int(m.group(1)) for m in found]
        ports = [int(m.group(3)) for m in found]
        parent = served.proc.pid
        assert pids[0] == parent and len(set(pids)) == 3 and len(set(ports)) == 3, found
        # Only the parent holds its listening socket: the children closed
        # the copies the fork gave them.
        assert listening_holders(ports[0]) == [parent]
        for pid, port in zip(pids[1:], ports[1:]):
            assert listening_holders(port) == [pid]
        # Each process answers for itself: its own threads and its work. A
        # sampled capture can miss a light loop on a busy machine: up to
        # three captures, as Go's pprof tests retry theirs.
        for _attempt in range(3):
            out = go_pprof_files([found[1].group(2) + "profile?seconds=1"], "-top")
            if "forked_child_work" in out:
                break
        assert "forked_child_work" in out, out
        status, _, body = get(ports[0], "/debug/pprof/goroutine?debug=2")
        assert status == 200 and b"main" in body and b"forked_child_work" not in body, body
        # The discovery files name the three, children under the parent.
        entries = {e["pid"]: e for e in http.servers(str(discovery))}
        assert sorted(entries) == sorted(pids)
        assert [entries[p]["ppid"] for p in pids[1:]] == [parent, parent]
        assert [entries[p]["port"] for p in pids] == ports
        listed = run_samprof(["serve", "--list"], tmp_path, timeout=30)
        assert listed.returncode == 0
        assert all(str(p) in listed.stdout.decode() for p in pids), listed.stdout
        stop.touch()
        assert served.finish() == 0, "".join(served.stderr)
    # The processes that exited through the interpreter removed their files;
    # the os._exit child's is removed by the next reader.
    exited, skipped_exit = map(int, (tmp_path / "stop.children").read_text().split())
    assert sorted(pids[1:]) == sorted([exited, skipped_exit])
    names = sorted(os.listdir(discovery))
    assert names == [f"{skipped_exit}.json"], names
    assert http.servers(str(discovery)) == []
    assert os.listdir(discovery) == []


def test_serve_passes_the_exit_status_through(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nsys.exit(3)\n")
    r = run_samprof(["serve", "--listen", "127.0.0.1:0", str(script)], tmp_path, timeout=30)
    assert r.returncode == 3, r.stderr
    assert SERVES.search(r.stderr.decode()), r.stderr


def test_gunicorn_workers_each_serve_on_their_own_port(tmp_path, discovery):
    with samprof_serve(
        "--listen", "127.0.0.1:0", "-m", "gunicorn", "-w", "2", "-b", "127.0.0.1:0",
        "--chdir", SCRIPTS, "--graceful-timeout", "5", "serve_wsgi_app:app",
        cwd=str(tmp_path),
    ) as served:  # fmt: skip
        found = served.wait_for(SERVES, 3)
        [listening] = served.wait_for(GUNICORN_LISTENING, 1)
        app_port = int(listening.group(1))
        master = served.proc.pid
        workers = [int(m.group(1)) for m in found[1:]]
        assert int(found[0].group(1)) == master, found
        entries = {e["pid"]: e for e in http.servers(str(discovery))}
        assert [entries[w]["ppid"] for w in workers] == [master, master]

        # Load on the application while both workers are profiled.
        done = threading.Event()

        def load():
            while not done.is_set():
                assert get(app_port, "/work", timeout=10)[0] == 200

        loaders = [threading.Thread(target=load) for _ in range(2)]
        outs = {}

        def capture(m):
            outs[m.group(1)] = go_pprof_files([m.group(2) + "profile?seconds=1"], "-top")

        captures = [threading.Thread(target=capture, args=(m,)) for m in found[1:]]
        for t in loaders + captures:
            t.start()
        for t in captures:
            t.join(timeout=60)
        done.set()
        for t in loaders:
            t.join(timeout=30)
        assert any("serve_app_work" in out for out in outs.values()), outs
        # The master's port answers for the master, a worker's for the worker.
        _, _, body = get(int(found[0].group(3)), "/debug/pprof/goroutine?debug=1")
        assert b"arbiter.py" in body, body
        _, _, body = get(int(found[1].group(3)), "/debug/pprof/goroutine?debug=1")
        assert b"workers/sync.py" in body and b"arbiter.py" in body, body

        served.proc.send_signal(signal.SIGTERM)
        assert served.finish() == 0, "".join(served.stderr)
    assert os.listdir(discovery) == []


def test_token_file_and_refusals(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("pass\n")
    # Not loopback, no token: a usage error before anything runs.
    r = run_samprof(["serve", "--listen", "0.0.0.0:0", str(script)], tmp_path, timeout=30)
    assert r.returncode == 2 and b"needs --token-file" in r.stderr, r.stderr
    r = run_samprof(["serve", "--listen", "nowhere", str(script)], tmp_path, timeout=30)
    assert r.returncode == 2 and b"expected HOST:PORT" in r.stderr, r.stderr
    r = run_samprof(["serve", "--token-file", "missing", str(script)], tmp_path, timeout=30)
    assert r.returncode == 1 and b"cannot read the token: missing" in r.stderr, r.stderr
    # A port that is taken: a clear error, not a traceback.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_samprof(["serve", "--listen", f"127.0.0.1:{port}", str(script)], tmp_path)
    assert r.returncode == 1, r.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use".encode() in r.stderr

    # With a token, every request needs it; it never shows in the output.
    token = "s3cret-token"
    (tmp_path / "token").write_text(token + "\n")
    os.chmod(tmp_path / "token", 0o600)
    waits = tmp_path / "waits.py"
    waits.write_text("import sys\nsys.stdin.read()\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "samprof", "serve", "--listen", "127.0.0.1:0"]
        + ["--token-file", str(tmp_path / "token"), str(waits)],
        cwd=tmp_path,
        env=samprof_env(),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        port = int(SERVES.search(line).group(3))
        assert_go_error(*get(port, "/debug/pprof/cmdline"), 401, "Unauthorized")
        headers = {"Authorization": f"Bearer {token}"}
        status, _, body = get(port, "/debug/pprof/cmdline", headers=headers)
        assert status == 200 and body.endswith(b"waits.py"), body
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        rest = proc.stderr.read()
    assert proc.returncode == 0
    assert token not in line + rest


def test_list_refuses_a_program(tmp_path):
    r = run_samprof(["serve", "--list", "x.py"], tmp_path, timeout=30)
    assert r.returncode == 2 and b"--list runs no program" in r.stderr, r.stderr
    r = run_samprof(["serve", "--list"], tmp_path, timeout=30)
    assert r.returncode == 0 and b"no process serves now" in r.stderr, r.stderr
