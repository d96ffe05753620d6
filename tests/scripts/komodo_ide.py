# -*- coding: utf-8 -*-
"""An IDE driving samprof's DBGP engine: ActiveState's Komodo library
(``dbgp.server``, PyPI's komodo-pydbgp), which is Python 2 code; run it
with Python 2.7.

It listens on 127.0.0.1, prints "listening PORT", reads the port of the
WSGI server under test (tests/scripts/debug_wsgi_app.py) from stdin, makes
its requests with triggers, debugs them, and prints what it saw as one
JSON object. Lines come from argv[1]: a JSON object of tagged line numbers
of the application. Every wait is bounded.
"""
import json
import logging
import socket
import sys
import threading
import time
import urllib2

import dbgp.server
from dbgp.common import RESUME_GO, RESUME_STEP_IN, RESUME_STEP_OUT, RESUME_STEP_OVER

TIMEOUT = 20


class Manager(dbgp.server.manager):
    def __init__(self):
        dbgp.server.manager.__init__(self)
        self.lock = threading.Condition()
        self.sessions = []  # every session, in the order they connected
        self.ready = []  # sessions the library handed to notifyInit

    def initHandler(self, session, init):
        with self.lock:
            self.sessions.append(session)
            self.lock.notify_all()
        return dbgp.server.manager.initHandler(self, session, init)

    def notifyInit(self, session, init):
        with self.lock:
            self.ready.append(session)
            self.lock.notify_all()

    def wait(self, what, count):
        deadline = time.time() + TIMEOUT
        with self.lock:
            while len(getattr(self, what)) < count:
                left = deadline - time.time()
                if left <= 0:
                    raise RuntimeError("no engine connected (%s)" % what)
                self.lock.wait(left)
            return getattr(self, what)[count - 1]


class Request(threading.Thread):
    """One HTTP request, made in a thread: (status, body) or an error."""

    def __init__(self, url, headers=None):
        threading.Thread.__init__(self)
        self.daemon = True
        self.url = url
        self.headers = headers or {}
        self.result = None
        self.start()

    def run(self):
        try:
            r = urllib2.urlopen(urllib2.Request(self.url, headers=self.headers), timeout=TIMEOUT)
            self.result = [r.getcode(), r.read()]
        except urllib2.HTTPError as e:
            self.result = [e.code, e.read()]
        except Exception as e:
            self.result = ["error", repr(e)]

    def outcome(self):
        self.join(TIMEOUT)
        return self.result


def resume(session, action):
    """A continuation, waited for: (status, line or None)."""
    session.resume(action)
    node = session.waitResponse(session._transaction_id, TIMEOUT)
    lines = [int(m.getAttribute("lineno")) for m in node.getElementsByTagName("xdebug:message")]
    return [node.getAttribute("status"), lines[0] if lines else None, node.getAttribute("reason")]


def line_breakpoint(session, uri, line):
    bp = dbgp.server.breakpoint()
    bp.initLine("Python", uri, line, "enabled", 0)
    return session.breakpointSet(bp)


def wait_status(session, status):
    deadline = time.time() + TIMEOUT
    while session.statusName != status and time.time() < deadline:
        time.sleep(0.02)
    return session.statusName


def text(value):
    if isinstance(value, unicode):
        return value
    return value.decode("utf-8", "replace")


def stepping(mgr, base, uri, lines):
    """Break on a line of a request handler, read locals and nested
    properties, step into, over and out, evaluate, set a variable."""
    seen = {}
    request = Request(base + "/hello?name=komodo&XDEBUG_SESSION_START=komodo")
    s = mgr.wait("ready", 1)
    seen["init"] = {"idekey": s.idekey, "thread": s.threadId, "language": s.languageName}
    seen["bp"] = text(line_breakpoint(s, uri, lines["call_greet"]))
    seen["run"] = resume(s, RESUME_GO)
    local = dict((text(p.name), p) for p in s.contextGet(0, 0))
    seen["locals"] = sorted(local)
    visitor = local["visitor"]
    seen["visitor"] = [text(visitor.classname), visitor.numchildren]
    seen["visitor.name"] = text(s.propertyGet("visitor.name").value)
    tags = s.propertyGet("visitor.tags")
    seen["tags"] = sorted(text(c.name) for c in tags.childProperties)
    langs = s.propertyGet("visitor.tags['langs']")
    seen["langs"] = [text(c.value) for c in langs.childProperties]
    seen["into"] = resume(s, RESUME_STEP_IN)
    seen["stack"] = [[text(f.where), f.lineno] for f in s.stackFramesGet()]
    seen["over"] = resume(s, RESUME_STEP_OVER)
    seen["eval"] = text(s.evalString("greeting + '?'").value)
    seen["set"] = text(s.propertySet("greeting", "'Howdy'").value)
    seen["out"] = resume(s, RESUME_STEP_OUT)
    seen["end"] = resume(s, RESUME_GO)
    s.stop()
    seen["response"] = request.outcome()
    return seen


def conditions(mgr, base, uri, lines):
    """A conditional breakpoint that holds and one that does not; an
    exception breakpoint; detach lets the request finish."""
    seen = {}
    request = Request(base + "/hello?name=cond&XDEBUG_SESSION_START=komodo")
    s = mgr.wait("ready", 2)
    for line, condition in (("greeting", "visitor.name == 'nobody'"), ("text", "visitor.name == 'cond'")):
        bp = dbgp.server.breakpoint()
        bp.initConditional("Python", condition, uri, lines[line], "enabled", 0)
        s.breakpointSet(bp)
    seen["run"] = resume(s, RESUME_GO)
    s.detach()
    seen["response"] = request.outcome()

    request = Request(base + "/fail?XDEBUG_SESSION_START=komodo")
    s = mgr.wait("ready", 3)
    bp = dbgp.server.breakpoint()
    bp.initException("Python", "KeyError", "enabled", 0)
    s.breakpointSet(bp)
    seen["exception"] = resume(s, RESUME_GO)
    s.detach()
    seen["fail_response"] = request.outcome()
    return seen


def vanishing(mgr, base, uri, lines):
    """The IDE goes away at a breakpoint: the request finishes."""
    request = Request(base + "/hello?name=gone&XDEBUG_SESSION_START=komodo")
    s = mgr.wait("ready", 4)
    line_breakpoint(s, uri, lines["greeting"])
    seen = {"run": resume(s, RESUME_GO)}
    sock = s._socket
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    seen["response"] = request.outcome()
    seen["after"] = Request(base + "/hello?name=after").outcome()
    return seen


def concurrent(mgr, base, uri, lines):
    """Two triggered requests at once, each its own session (the library
    sends the second thread of an application ``run`` itself); plain
    requests are served meanwhile."""
    dbgp.server.breakpointManager._breakpoints.clear()
    mgr.breakpointManager.addBreakpointLine("Python", uri, lines["text"], "enabled", 0, None, None)
    first = Request(base + "/hello?name=one&XDEBUG_SESSION_START=komodo")
    a = mgr.wait("ready", 5)
    seen = {"a_run": resume(a, RESUME_GO)}
    second = Request(base + "/hello?name=two", {"Cookie": "XDEBUG_SESSION=komodo"})
    b = mgr.wait("sessions", 6)
    seen["b_status"] = wait_status(b, "break")
    seen["threads"] = [a.threadId, b.threadId]
    seen["meanwhile"] = [Request(base + "/hello?name=plain").outcome() for _ in range(3)]
    a.propertySet("greeting", "'Hi'")
    seen["a_end"] = resume(a, RESUME_GO)
    seen["b_end"] = resume(b, RESUME_GO)
    a.stop()
    b.stop()
    seen["responses"] = [first.outcome(), second.outcome()]
    return seen


def main():
    logging.basicConfig(level=logging.ERROR)
    lines = json.loads(sys.argv[1])
    uri = sys.argv[2]
    mgr = Manager()
    dbgp.server.breakpointManager._breakpoints.clear()
    _, port = mgr.listen("127.0.0.1", 0)
    sys.stdout.write("listening %d\n" % port)
    sys.stdout.flush()
    base = "http://127.0.0.1:%d" % int(sys.stdin.readline())
    results = {}
    for scenario in (stepping, conditions, vanishing, concurrent):
        try:
            results[scenario.__name__] = scenario(mgr, base, uri, lines)
        except Exception as e:
            results[scenario.__name__] = {"error": repr(e)}
    sys.stdout.write(json.dumps(results) + "\n")
    sys.stdout.flush()
    listener = mgr._listener._thread
    mgr.shutdown()
    listener.join(2)


if __name__ == "__main__":
    main()
