"""samprof's DBGP engine driven by an IDE-side library this project did not
write: ActiveState's Komodo ``dbgp.server`` (komodo-pydbgp, Python 2 code,
run by Python 2.7; ``make deps`` installs both), debugging requests of a
WSGI application under gunicorn's threaded worker
(tests/scripts/komodo_ide.py holds the IDE's side of each scenario)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
from support import SCRIPTS
from support.debugging import _lines, uri_of
from support.processes import child_env
from support.servers import GUNICORN_LISTENING, running

ROOT = os.path.dirname(os.path.dirname(SCRIPTS))
# Where `make deps` installs komodo-pydbgp for Python 2.7.
KOMODO = os.path.join(ROOT, "build", "komodo-pydbgp")
APP = "debug_wsgi_app.py"


def _python2() -> str:
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/2.7.*/bin/python2.7")))
    if not found or not os.path.isdir(os.path.join(KOMODO, "dbgp")):
        pytest.fail("Python 2.7 with komodo-pydbgp is missing: run `make deps`")
    return found[-1]


# What differs between Pythons is the engine's tracing, tested on every one
# (test_engine.py); this runs on the oldest and the newest, and not under the
# sanitizers: no C code of samprof's runs here (tests/support/scope.py).
@pytest.mark.bounds
def test_komodo_debugs_requests_under_gunicorn(tmp_path):
    lines = _lines(os.path.join(SCRIPTS, APP))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": KOMODO, "LC_ALL": "C.UTF-8"}
    ide = subprocess.Popen(
        [_python2(), os.path.join(SCRIPTS, "komodo_ide.py"), json.dumps(lines), uri_of(APP)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        listening = ide.stdout.readline()
        assert listening.startswith("listening "), (listening, ide.stderr.read())
        server_env = child_env({"SAMPROF_TEST_IDE_PORT": listening.split()[1]})
        args = [sys.executable, "-m", "gunicorn", "-w", "1", "-k", "gthread", "--threads", "6"]
        args += ["-b", "127.0.0.1:0", "--chdir", SCRIPTS, "--graceful-timeout", "5"]
        with running(args + ["debug_wsgi_app:app"], str(tmp_path), server_env) as server:
            (found,) = server.wait_for(GUNICORN_LISTENING)
            out, err = ide.communicate(found.group(1) + "\n", timeout=120)
            assert server.proc.poll() is None, "the server died"
    finally:
        if ide.poll() is None:
            ide.kill()
            ide.wait()
    assert out.strip(), err
    seen = json.loads(out.strip().splitlines()[-1])

    step = seen["stepping"]
    assert step["init"] == {
        "idekey": "komodo",
        "thread": step["init"]["thread"],
        "language": "Python",
    }
    assert step["run"] == ["break", lines["call_greet"], "ok"]
    assert step["locals"] == ["environ", "query", "start_response", "visitor"]
    assert step["visitor"] == ["debug_wsgi_app.Visitor", 2]
    assert step["visitor.name"] == "komodo"
    assert step["tags"] == ["'langs'", "'level'"]
    assert step["langs"] == ["python", "go"]
    assert step["into"] == ["break", lines["greeting"], "ok"]
    assert step["stack"][:2] == [["greet", lines["greeting"]], ["hello", lines["call_greet"]]]
    assert step["over"] == ["break", lines["text"], "ok"]
    assert step["eval"] == "Hello?"
    assert step["set"] == "Howdy"
    assert step["out"] == ["break", lines["start_response"], "ok"]
    assert step["end"][0] == "stopping"
    assert step["response"] == [200, "Howdy, komodo!"]

    cond = seen["conditions"]
    assert cond["run"] == ["break", lines["text"], "ok"]
    assert cond["response"] == [200, "Hello, cond!"]
    assert cond["exception"] == ["break", lines["lookup"], "exception"]
    assert cond["fail_response"] == [200, "recovered"]

    gone = seen["vanishing"]
    assert gone["run"] == ["break", lines["greeting"], "ok"]
    assert gone["response"] == [200, "Hello, gone!"]
    assert gone["after"] == [200, "Hello, after!"]

    both = seen["concurrent"]
    assert both["a_run"] == ["break", lines["text"], "ok"]
    assert both["b_status"] == "break"
    assert both["threads"][0] != both["threads"][1]
    assert both["meanwhile"] == [[200, "Hello, plain!"]] * 3
    assert both["a_end"][0] == "stopping" and both["b_end"][0] == "stopping"
    assert both["responses"] == [[200, "Hi, one!"], [200, "Hello, two!"]]
