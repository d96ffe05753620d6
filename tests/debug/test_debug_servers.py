"""samprof.wsgi.DebugMiddleware under gunicorn's threaded worker and
samprof.asgi.DebugMiddleware under uvicorn, debugged by the spec-written
IDE side (support.dbgp): sessions of concurrent requests, the traffic that
flows meanwhile, no IDE, an IDE that goes away; and ``samprof debug``."""

from __future__ import annotations

import re
import sys
import time

import pytest
from support import SCRIPTS
from support.dbgp import InThread, listening, tag, unb64
from support.debugging import line_of, uri_of
from support.httpclient import get
from support.processes import child_env, run_samprof
from support.servers import GUNICORN_LISTENING, UVICORN_LISTENING, running

APP = "debug_wsgi_app.py"

# What differs between Pythons is the engine's tracing, tested on every one
# (test_engine.py); the servers around it run on the oldest and the newest,
# and not under the sanitizers: no C code of samprof's runs here
# (tests/support/scope.py).
pytestmark = pytest.mark.bounds


def line(name: str, script: str = APP) -> str:
    return str(line_of(script, name))


def gunicorn(tmp_path, ide_port: int):
    env = child_env({"SAMPROF_TEST_IDE_PORT": str(ide_port)})
    args = [sys.executable, "-m", "gunicorn", "-w", "1", "-k", "gthread", "--threads", "6"]
    args += ["-b", "127.0.0.1:0", "--chdir", SCRIPTS, "--graceful-timeout", "5"]
    return running(args + ["debug_wsgi_app:app"], str(tmp_path), env)


def test_concurrent_sessions_while_other_requests_flow(tmp_path):
    with listening() as ide, gunicorn(tmp_path, ide.port) as server:
        (found,) = server.wait_for(GUNICORN_LISTENING)
        port = int(found.group(1))
        assert get(port, "/hello?name=plain")[2] == b"Hello, plain!"

        first = InThread(get, port, "/hello?name=first&XDEBUG_SESSION_START=alice")
        a = ide.accept()
        second = InThread(get, port, "/hello?name=second", {"Cookie": "XDEBUG_SESSION=bob"})
        b = ide.accept()
        assert {a.init.get("idekey"), b.init.get("idekey")} == {"alice", "bob"}
        if a.init.get("idekey") == "bob":
            a, b = b, a
        assert a.init.get("thread") != b.init.get("thread")
        assert a.init.get("appid") == b.init.get("appid")
        assert a.init.get("fileuri") == uri_of(APP)
        for engine in (a, b):
            engine.command("breakpoint_set", "-t", "line", "-f", uri_of(APP), "-n", line("text"))
            assert engine.stopped_at(engine.command("run")) == int(line("text"))
        # Both requests are stopped; untriggered ones are served meanwhile.
        for _ in range(5):
            status, _, body = get(port, "/hello?name=meanwhile", timeout=5)
            assert (status, body) == (200, b"Hello, meanwhile!")
        visitor = b.command("property_get", "-n", "visitor").find(tag("property"))
        assert unb64(visitor.find(tag("property")).text) == "second"
        b.command("property_set", "-n", "greeting", data="'Bonjour'")
        for engine in (a, b):
            assert engine.command("run").get("status") == "stopping"
            engine.command("stop")
        assert first.join()[2] == b"Hello, first!"
        assert second.join()[2] == b"Bonjour, second!"

        # The IDE goes away at a breakpoint: the request finishes as if
        # undebugged, and the server goes on.
        third = InThread(get, port, "/hello?name=third&XDEBUG_SESSION_START=carol")
        c = ide.accept()
        c.command("breakpoint_set", "-t", "line", "-f", uri_of(APP), "-n", line("greeting"))
        c.command("run")
        c.close()
        assert third.join()[:3:2] == (200, b"Hello, third!")
        # stop at a breakpoint ends the request with a 500.
        fourth = InThread(get, port, "/hello?name=fourth&XDEBUG_SESSION_START=dave")
        d = ide.accept()
        d.command("breakpoint_set", "-t", "line", "-f", uri_of(APP), "-n", line("greeting"))
        d.command("run")
        d.command("stop")
        status, _, body = fourth.join()
        assert status == 500 and b"stopped from the debugger" in body
        assert get(port, "/hello?name=after")[2] == b"Hello, after!"


def test_no_ide_listening(tmp_path):
    with listening() as ide:
        port = ide.port
    with gunicorn(tmp_path, port) as server:
        (found,) = server.wait_for(GUNICORN_LISTENING)
        started = time.monotonic()
        status, _, body = get(int(found.group(1)), "/hello?name=x&XDEBUG_SESSION_START=k")
        assert (status, body) == (200, b"Hello, x!")
        assert time.monotonic() - started < 5
        server.wait_for(re.compile(rf"no IDE answers at 127\.0\.0\.1:{port}"))


def test_asgi_request_in_its_own_thread(tmp_path):
    with listening() as ide:
        env = child_env({"SAMPROF_TEST_IDE_PORT": str(ide.port)})
        args = [sys.executable, "-m", "uvicorn", "--port", "0", "--app-dir", SCRIPTS]
        with running(args + ["debug_asgi_app:app"], str(tmp_path), env) as server:
            (found,) = server.wait_for(UVICORN_LISTENING)
            port = int(found.group(1))
            request = InThread(get, port, "/items/7?XDEBUG_SESSION_START=k")
            e = ide.accept()
            e.command("breakpoint_set", "-t", "call", "-m", "item_handler")
            assert e.command("run").get("status") == "break"
            frames = e.command("stack_get").findall(tag("stack"))
            assert frames[0].get("where") == "item_handler"
            # The server's loop still serves while the request is stopped.
            assert get(port, "/items/8", timeout=5)[0] == 200
            e.command("detach")
            status, _, body = request.join()
            assert status == 200 and b"7" in body


def test_samprof_debug_runs_a_script_stopped_at_its_first_line(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys\nvalue = 20\nvalue += 1\nprint('value', value)\nsys.exit(value)\n"
    )
    with listening() as ide:
        args = [sys.executable, "-m", "samprof", "debug", "--port", str(ide.port), "--idekey", "k"]
        with running(args + ["--", str(script), "arg"], str(tmp_path), child_env()) as proc:
            e = ide.accept()
            assert e.init.get("fileuri") == "file://" + str(script)
            assert e.init.get("idekey") == "k"
            assert e.stopped_at(e.command("step_into")) == 1
            assert e.stopped_at(e.command("step_over")) == 2
            assert e.stopped_at(e.command("step_over")) == 3
            e.command("property_set", "-n", "value", data="40")
            (frame,) = e.command("stack_get").findall(tag("stack"))
            assert frame.get("where") == "<module>"
            assert e.command("run").get("status") == "stopping"
            e.command("stop")
            assert proc.finish() == 41


def test_samprof_debug_without_an_ide(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("print('never')\n")
    with listening() as ide:
        port = ide.port
    proc = run_samprof(["debug", "--port", str(port), "--", str(script)], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == b""
    assert f"no IDE listening at 127.0.0.1:{port}".encode() in proc.stderr
