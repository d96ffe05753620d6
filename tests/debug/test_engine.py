"""The DBGP engine driven over a real socket by an IDE side written from the
spec (support.dbgp), which checks the framing and the XML of every packet;
the engine debugs tests/scripts/debug_target.py in a thread of this
process."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading

import pytest
from support.dbgp import XDEBUG_NS, InThread, b64, listening, tag, unb64
from support.debugging import SCRIPTS, line_of, uri_of

from samprof import debug

TARGET = "debug_target.py"


def _load_target():
    spec = importlib.util.spec_from_file_location("debug_target", os.path.join(SCRIPTS, TARGET))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


target = _load_target()


def line(name: str) -> str:
    return str(line_of(TARGET, name))


def debugged(ide, function, *args) -> InThread:
    def run():
        session = debug.Session.open("127.0.0.1", ide.port, "test-key", "file:///app.py")
        return session.call(function, *args)

    return InThread(run)


def properties(element) -> dict:
    return {p.get("name"): p for p in element.findall(tag("property"))}


def test_every_command_answers_as_the_spec_says():
    with listening() as ide:
        thread = debugged(ide, target.outer, 5)
        e = ide.accept()
        init = e.init.attrib
        assert init["language"] == "Python" and init["protocol_version"] == "1.0"
        assert init["idekey"] == "test-key" and init["appid"] == str(os.getpid())
        assert init["thread"] == str(thread.thread.native_id)
        assert init["fileuri"] == "file:///app.py"

        assert e.command("status").get("status") == "starting"
        for feature in (
            "language_supports_threads",
            "language_name",
            "language_version",
            "encoding",
            "protocol_version",
            "supports_async",
            "data_encoding",
            "breakpoint_languages",
            "breakpoint_types",
            "multiple_sessions",
            "max_children",
            "max_data",
            "max_depth",
            "run",
            "property_set",
        ):
            answer = e.command("feature_get", "-n", feature)
            assert answer.get("feature_name") == feature and answer.get("supported") == "1", feature
        assert e.command("feature_get", "-n", "language_name").text == "Python"
        assert e.command("feature_get", "-n", "breakpoint_types").text.split() == [
            "line",
            "conditional",
            "call",
            "return",
            "exception",
        ]
        assert e.command("feature_get", "-n", "no_such_thing").get("supported") == "0"
        assert e.command("feature_set", "-n", "max_depth", "-v", "2").get("success") == "1"
        assert e.command("feature_get", "-n", "max_depth").text == "2"
        e.command("feature_set", "-n", "max_depth", "-v", "1")
        assert e.error_code("feature_set", "-n", "no_such_thing", "-v", "1") == 3
        assert e.error_code("feature_set", "-n", "encoding", "-v", "ISO-8859-1") == 900
        maps = {m.get("name"): m for m in e.command("typemap_get").findall(tag("map"))}
        assert maps["int"].get("type") == "int" and maps["dict"].get("type") == "hash"
        assert maps["str"].get("{http://www.w3.org/2001/XMLSchema-instance}type") == "xsd:string"

        uri = uri_of(TARGET)
        bp = e.command("breakpoint_set", "-t", "line", "-f", uri, "-n", line("outer_call"))
        assert bp.get("state") == "enabled"
        assert e.error_code("breakpoint_set", "-t", "line", "-f", uri, "-n", line("comment")) == 203
        assert e.error_code("breakpoint_set", "-t", "line", "-f", uri, "-n", "0") == 202
        assert e.error_code("breakpoint_set", "-t", "line", "-f", uri, "-n", "9999") == 202
        assert e.error_code("breakpoint_set", "-t", "watch", "--", b64("x")) == 201
        assert e.error_code("breakpoint_set", "-f", uri, "-n", line("outer_call")) == 3
        assert e.error_code("breakpoint_set", "-t", "line", "-s", "on", "-f", uri, "-n", "5") == 204
        assert e.error_code("breakpoint_set", "-t", "conditional", "-f", uri, data="1 +") == 207
        got = e.command("breakpoint_get", "-d", bp.get("id")).find(tag("breakpoint"))
        assert got.get("filename") == uri and got.get("lineno") == line("outer_call")
        assert e.error_code("breakpoint_get", "-d", "99999") == 205
        assert e.error_code("stack_get") == 5
        assert e.error_code("break") == 5
        assert e.error_code("no_such_command") == 4
        e.sock.sendall(b"status -i 50 -i 51\0")
        assert e.error_code_of_sent("status", "50") == 2
        e.sock.sendall(b'property_get -i 52 -n "unterminated\0')
        assert e.error_code_of_sent("property_get", "52") == 1

        stop = e.command("run")
        assert e.stopped_at(stop) == int(line("outer_call"))
        message = stop.find(f"{{{XDEBUG_NS}}}message")
        assert message.get("filename") == uri
        assert e.command("status").get("status") == "break"
        assert e.command("stack_depth").get("depth") == "1"
        (frame,) = e.command("stack_get").findall(tag("stack"))
        assert frame.get("where") == "outer" and frame.get("lineno") == line("outer_call")
        assert frame.get("level") == "0" and frame.get("filename") == uri
        assert e.error_code("stack_get", "-d", "5") == 301
        contexts = e.command("context_names").findall(tag("context"))
        assert [(c.get("name"), c.get("id")) for c in contexts] == [
            ("Locals", "0"),
            ("Globals", "1"),
        ]
        local = properties(e.command("context_get"))
        assert set(local) == {"n", "point", "items"}
        assert local["n"].get("type") == "int" and unb64(local["n"].text) == "5"
        assert local["point"].get("classname") == "debug_target.Point"
        assert {"Point", "inner", "outer"} <= set(properties(e.command("context_get", "-c", "1")))
        assert e.error_code("context_get", "-c", "7") == 302

        items = e.command("property_get", "-n", "items").find(tag("property"))
        assert items.get("type") == "dict" and items.get("numchildren") == "3"
        children = items.findall(tag("property"))
        assert [(c.get("name"), c.get("fullname")) for c in children] == [
            ("'a'", "items['a']"),
            ("'b'", "items['b']"),
            ("3", "items[3]"),
        ]
        nested = e.command("property_get", "-n", "items['a'][2]").find(tag("property"))
        assert nested.get("name") == "2"
        (deep,) = nested.findall(tag("property"))
        assert deep.get("fullname") == "items['a'][2]['deep']" and unb64(deep.text) == "value"
        point = e.command("property_get", "-n", "items['b']").find(tag("property"))
        assert {c.get("fullname"): unb64(c.text) for c in point.findall(tag("property"))} == {
            "items['b'].x": "5",
            "items['b'].y": "6",
        }
        e.command("feature_set", "-n", "max_children", "-v", "2")
        page = e.command("property_get", "-n", "items", "-p", "1").find(tag("property"))
        assert page.get("page") == "1" and page.get("pagesize") == "2"
        assert [c.get("name") for c in page.findall(tag("property"))] == ["3"]
        e.command("feature_set", "-n", "max_children", "-v", "32")
        assert e.error_code("property_get", "-n", "no_such_name") == 300
        value = e.command("property_value", "-n", "items['a'][2]['deep']")
        assert unb64(value.text) == "value" and value.get("size") == "5"
        e.command("feature_set", "-n", "max_data", "-v", "3")
        long = e.command("eval", data="'x' * 10").find(tag("property"))
        assert long.get("size") == "10" and unb64(long.text) == "xxx"
        e.command("feature_set", "-n", "max_data", "-v", "1024")
        assert unb64(e.command("eval", data="n * 10").find(tag("property")).text) == "50"
        assert e.error_code("eval", data="1 / 0") == 206
        source = e.command("source", "-b", "1", "-e", "2")
        assert source.get("encoding") == "base64" and unb64(source.text).startswith(
            '"""Code the DBGP'
        )
        assert len(unb64(source.text).splitlines()) == 2
        assert e.error_code("source", "-f", "file:///no/such/file.py") == 100

        assert e.stopped_at(e.command("step_into")) == int(line("inner_body"))
        frames = e.command("stack_get").findall(tag("stack"))
        assert [(f.get("where"), f.get("lineno")) for f in frames] == [
            ("inner", line("inner_body")),
            ("outer", line("outer_call")),
        ]
        assert e.stopped_at(e.command("step_out")) == int(line("outer_after"))
        assert e.command("property_set", "-n", "n", data="100").get("success") == "1"
        assert e.command("property_set", "-n", "point.x", data="-1").get("success") == "1"
        assert e.error_code("property_set", "-n", "n", data="undefined_name") == 206
        assert e.stopped_at(e.command("step_over")) == int(line("outer_print"))
        message = e.command("property_get", "-n", "message").find(tag("property"))
        assert unb64(message.text) == "n=100 doubled=10 x=-1"
        assert e.command("stdout", "-c", "2").get("success") == "1"
        assert e.stopped_at(e.command("step_over")) != int(line("outer_print"))
        assert "".join(unb64(s.text) for s in e.streams if s.get("type") == "stdout") == (
            "n=100 doubled=10 x=-1\n"
        )
        e.command("stdout", "-c", "0")

        listed = e.command("breakpoint_list").findall(tag("breakpoint"))
        assert [b.get("id") for b in listed] == [bp.get("id")]
        e.command("breakpoint_update", "-d", bp.get("id"), "-s", "disabled")
        got = e.command("breakpoint_get", "-d", bp.get("id")).find(tag("breakpoint"))
        assert got.get("state") == "disabled"
        e.command("breakpoint_remove", "-d", bp.get("id"))
        assert e.command("breakpoint_list").findall(tag("breakpoint")) == []

        done = e.command("run")
        assert done.get("status") == "stopping"
        assert e.command("stop").get("status") == "stopped"
        assert e.closed()
        assert thread.join()[0] == "n=100 doubled=10 x=-1"
        assert thread.error is None


def test_breakpoints_of_every_kind():
    def program():
        return target.loop(10), target.failing(), target.outer(1)[0]

    with listening() as ide:
        thread = debugged(ide, program)
        e = ide.accept()
        uri = uri_of(TARGET)
        third = e.command(
            "breakpoint_set",
            "-t",
            "line",
            "-f",
            uri,
            "-n",
            line("loop_body"),
            "-h",
            "3",
            "-o",
            "==",
        ).get("id")
        assert e.stopped_at(e.command("run")) == int(line("loop_body"))
        assert unb64(e.command("property_get", "-n", "i").find(tag("property")).text) == "2"
        e.command("breakpoint_remove", "-d", third)

        condition = e.command(
            "breakpoint_set", "-t", "conditional", "-f", uri, "-n", line("loop_body"), data="i == 7"
        ).get("id")
        assert e.stopped_at(e.command("run")) == int(line("loop_body"))
        assert unb64(e.command("property_get", "-n", "i").find(tag("property")).text) == "7"
        hits = e.command("breakpoint_get", "-d", condition).find(tag("breakpoint"))
        assert hits.get("hit_count") == "1"
        e.command("breakpoint_remove", "-d", condition)

        e.command("breakpoint_set", "-t", "exception", "-x", "LookupError")
        stop = e.command("run")
        assert e.stopped_at(stop) == int(line("raise")) and stop.get("reason") == "exception"
        assert stop.find(f"{{{XDEBUG_NS}}}message").get("exception") == "KeyError"
        for b in e.command("breakpoint_list").findall(tag("breakpoint")):
            e.command("breakpoint_remove", "-d", b.get("id"))

        e.command("breakpoint_set", "-t", "call", "-m", "inner")
        e.command("breakpoint_set", "-t", "return", "-m", "debug_target.inner")
        e.command("breakpoint_set", "-t", "line", "-f", uri, "-n", line("outer_print"), "-r", "1")
        assert e.stopped_at(e.command("run")) == int(line("inner_body"))
        assert e.stopped_at(e.command("run")) == int(line("inner_return"))
        assert e.stopped_at(e.command("run")) == int(line("outer_print"))
        # The temporary breakpoint is gone after its hit.
        assert len(e.command("breakpoint_list").findall(tag("breakpoint"))) == 2
        assert e.command("run").get("status") == "stopping"
        e.command("stop")
        assert thread.join() == (45, "caught", "n=1 doubled=2 x=1")


def test_break_while_running_and_status():
    stop_spinning = threading.Event()

    def spin():
        while not stop_spinning.is_set():
            stop_spinning.wait(0.001)
        return "done"

    with listening() as ide:
        thread = debugged(ide, spin)
        e = ide.accept()
        run = e.send("run")
        assert e.command("status").get("status") == "running"
        assert e.error_code("stack_get") == 5
        assert e.command("break").get("success") == "1"
        stopped = e.response("run", run)
        assert stopped.get("status") == "break"
        (frame,) = e.command("stack_get").findall(tag("stack"))
        assert frame.get("where").endswith("spin")
        # A breakpoint set while the program runs holds in the frame that
        # was already running.
        run = e.send("run")
        wait_line = spin.__code__.co_firstlineno + 2
        e.command("breakpoint_set", "-t", "line", "-f", "file://" + __file__, "-n", str(wait_line))
        assert e.stopped_at(e.response("run", run)) == wait_line
        stop_spinning.set()
        e.command("detach")
        assert thread.join() == "done"


def test_detach_stop_and_the_ide_going_away():
    uri = uri_of(TARGET)
    for ending in ("detach", "stop", "vanish"):
        with listening() as ide:
            thread = debugged(ide, target.outer, 3)
            e = ide.accept()
            e.command("breakpoint_set", "-t", "line", "-f", uri, "-n", line("inner_body"))
            e.command("run")
            if ending == "vanish":
                e.close()
            else:
                assert e.command(ending).get("status") == "stopped"
                assert e.closed()
            result = thread.join()
            if ending == "stop":
                assert isinstance(thread.error, debug.Stopped)
            else:
                assert thread.error is None and result[0] == "n=3 doubled=6 x=3"


def test_connect_from_code():
    def program():
        x = 41
        debug.connect(port=ide.port)
        y = x + 1
        return y

    y_line = program.__code__.co_firstlineno + 3
    with listening() as ide:
        thread = InThread(program)
        e = ide.accept()
        assert e.init.get("fileuri") == "file://" + os.path.abspath(__file__)
        assert e.stopped_at(e.command("run")) == y_line
        e.command("property_set", "-n", "x", data="99")
        assert e.command("run").get("status") == "stopping"
        e.command("stop")
        assert thread.join() == 100


def test_no_ide_listening():
    with listening() as ide:
        port = ide.port
    with pytest.raises(OSError):
        debug.Session.open("127.0.0.1", port)
    assert debug.connect(port=port) is False


def test_production_keeps_the_gate_shut(monkeypatch):
    monkeypatch.setenv("ENVIRONMENT", "production")
    assert not debug.Gate(enabled=True).enabled
    assert debug.Gate(enabled=True, force=True).enabled
    monkeypatch.delenv("ENVIRONMENT")
    assert debug.Gate(enabled=True).enabled
    monkeypatch.delenv("SAMPROF_DEBUG", raising=False)
    assert not debug.Gate().enabled
    monkeypatch.setenv("SAMPROF_DEBUG", "1")
    gate = debug.Gate(idekey="mine")
    assert gate.enabled
    assert gate.idekey_of("a=1&XDEBUG_SESSION_START=mine", "") == "mine"
    assert gate.idekey_of("XDEBUG_SESSION_START=other", "") is None
    assert gate.idekey_of("", "x=1; XDEBUG_SESSION=mine") == "mine"
    assert gate.idekey_of("a=1", "x=1") is None


def test_parse_command_escapes():
    name, options, data = debug.parse_command(
        'property_get -i 5 -n "$x[\\"a b\\"] \\\\z" -c 0 -- ' + b64("x")
    )
    assert name == "property_get" and options == {"i": "5", "n": '$x["a b"] \\z', "c": "0"}
    assert data == b64("x")
    with pytest.raises(debug._CommandError) as e:
        debug.parse_command("status -i 1 -i 2")
    assert e.value.code == 2


def test_coroutines_step_over_their_awaits():
    with listening() as ide:
        thread = debugged(ide, asyncio.run, target.handler(10))
        e = ide.accept()
        e.command("breakpoint_set", "-t", "call", "-m", "handler")
        assert e.stopped_at(e.command("run")) == int(line("handler_first"))
        # Each await suspends the coroutine; the step waits for it to resume.
        assert e.stopped_at(e.command("step_over")) == int(line("handler_await"))
        assert e.stopped_at(e.command("step_over")) == int(line("handler_sleep"))
        assert e.stopped_at(e.command("step_over")) == int(line("handler_return"))
        # The call breakpoint did not fire again at each resume.
        bp = e.command("breakpoint_list").find(tag("breakpoint"))
        assert bp.get("hit_count") == "1"
        assert e.command("run").get("status") == "stopping"
        e.command("stop")
        assert thread.join() == 11


def test_stepping_on_from_a_return_breakpoint():
    with listening() as ide:
        thread = debugged(ide, target.outer, 2)
        e = ide.accept()
        e.command("breakpoint_set", "-t", "return", "-m", "inner")
        assert e.stopped_at(e.command("run")) == int(line("inner_return"))
        assert e.stopped_at(e.command("step_over")) == int(line("outer_after"))
        e.command("detach")
        assert thread.join()[0] == "n=2 doubled=4 x=2"


def test_what_the_ide_sends_never_reaches_the_program():
    with listening() as ide:
        thread = debugged(ide, target.outer, 4)
        e = ide.accept()
        # A NUL in a path or a condition makes Python raise ValueError.
        assert e.error_code("breakpoint_set", "-t", "line", "-f", "file:///a%00b", "-n", "1") == 202
        assert e.error_code("breakpoint_set", "-t", "conditional", "-f", "x.py", data="1\0") == 207
        e.command("breakpoint_set", "-t", "line", "-f", uri_of(TARGET), "-n", line("inner_body"))
        e.command("run")
        assert e.error_code("eval", data="__import__('sys').exit(3)") == 206
        cancelled = "(_ for _ in ()).throw(__import__('asyncio').CancelledError())"
        assert e.error_code("eval", data=cancelled) == 206
        assert e.error_code("property_get", "-n", "__import__('sys').exit(3)") == 300
        # The same while the program runs, answered by the reader.
        run = e.send("run")
        assert e.error_code("breakpoint_set", "-t", "line", "-f", "file:///a%00b", "-n", "1") == 202
        assert e.response("run", run).get("status") == "stopping"
        e.command("stop")
        assert thread.join()[0] == "n=4 doubled=8 x=4"
        assert thread.error is None


def test_a_listener_that_says_nothing_is_left_behind(monkeypatch):
    monkeypatch.setattr(debug, "START_TIMEOUT", 0.3)
    with listening() as ide:
        thread = debugged(ide, target.outer, 6)
        silent = ide.accept()
        assert thread.join(10)[0] == "n=6 doubled=12 x=6"
        assert silent.closed(5)
