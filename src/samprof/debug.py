"""A DBGP debugger engine: stop inside a running Python program from an IDE.

DBGP is the debugger protocol of Xdebug, Komodo, Eclipse DLTK, Vdebug and
the IDE extensions that speak to Xdebug (VS Code's PHP Debug, for one). The
engine connects out to the IDE, which listens (port 9003 by default), and
the IDE then drives it: breakpoints, stepping, the stack, variables,
evaluation. Three ways in:

- :func:`connect` from code stops in the IDE at the line after the call
  (``PYTHONBREAKPOINT=samprof.debug.connect`` makes ``breakpoint()`` do it);
- ``samprof debug [--host H] [--port P] [--idekey K] -- script.py`` runs a
  program under the engine, stopped before its first line;
- :class:`samprof.wsgi.DebugMiddleware` and :class:`samprof.asgi.DebugMiddleware`
  debug one request of a live application, chosen by the trigger that the
  IDEs' browser extensions set (``XDEBUG_SESSION_START=<idekey>`` in the
  query, or the ``XDEBUG_SESSION`` cookie).

A session belongs to one thread: it traces that thread alone
(``sys.settrace``), and the other threads of the process run on. It is a
development tool: ``eval`` and ``property_set`` run any code the IDE's user
types, with the program's rights. The middleware therefore stays off unless
it is enabled, and refuses to turn on where the environment says
production (see :class:`Gate`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import dis
import inspect
import io
import itertools
import keyword
import linecache
import logging
import os
import queue
import re
import reprlib
import runpy
import socket
import struct
import sys
import threading
import time
import types
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple
from xml.sax.saxutils import escape, quoteattr

__all__ = ["DEFAULT_PORT", "Gate", "Session", "Stopped", "connect"]

log = logging.getLogger("samprof.debug")

DEFAULT_HOST = "127.0.0.1"
# Xdebug 3's port; IDEs listen there by default (9000 before Xdebug 3).
DEFAULT_PORT = 9003
# How long a connection attempt waits for the IDE.
CONNECT_TIMEOUT = 0.5
# How long a session waits, after init, for the IDE's first command: a
# listener that accepts and says nothing (not an IDE) must not hold the
# request for good.
START_TIMEOUT = 30.0
# A send that blocks this long (an IDE that stopped reading) ends the session.
SEND_TIMEOUT = 30

_NS = "urn:debugger_protocol_v1"
_XDEBUG_NS = "https://xdebug.org/dbgp/xdebug"
_PROTOCOL_VERSION = "1.0"

# The error codes of the DBGP spec (section 6.5.1).
E_PARSE = 1
E_DUPLICATE = 2
E_OPTIONS = 3
E_UNIMPLEMENTED = 4
E_STATE = 5
E_FILE = 100
E_REDIRECT = 101
E_BREAKPOINT_TYPE = 201
E_BREAKPOINT_INVALID = 202
E_BREAKPOINT_NO_CODE = 203
E_BREAKPOINT_STATE = 204
E_BREAKPOINT_MISSING = 205
E_EVAL = 206
E_EXPRESSION = 207
E_PROPERTY = 300
E_DEPTH = 301
E_CONTEXT = 302
E_ENCODING = 900
E_INTERNAL = 998

_CONTINUATIONS = ("run", "step_into", "step_over", "step_out")
_BREAKPOINT_TYPES = ("line", "conditional", "call", "return", "exception")
_CONTEXTS = ("Locals", "Globals")

# Frames of these files are never shown or stepped into: samprof's own
# (the middleware, the runner, this engine), the runner's runpy, the import
# machinery and the event loop a debugged ASGI request runs on.
_SAMPROF_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_HIDDEN_PREFIXES = (
    _SAMPROF_DIR,
    os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep,
    os.path.dirname(os.path.abspath(concurrent.futures.__file__)) + os.sep,
    "<frozen importlib",
    "<frozen runpy",
)
_HIDDEN_FILES = frozenset([runpy.run_path.__code__.co_filename, threading.__file__])


class Stopped(BaseException):
    """Raised in the debugged thread when the IDE sends ``stop``: the
    program (or the request) ends there, as Xdebug's ``stop`` ends a
    script. A BaseException, so that ``except Exception`` in the program
    does not swallow it."""


class _CommandError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- the wire --------------------------------------------------------------


def parse_command(line: str) -> Tuple[str, Dict[str, str], Optional[str]]:
    """``name -a value -b "quoted value" -- base64data`` as (name, options,
    data), per DBGP 6.3. Raises _CommandError 1 (bad syntax) or 2 (an
    option given twice)."""
    name, _, rest = line.strip("\r\n ").partition(" ")
    if not name:
        raise _CommandError(E_PARSE, "empty command")
    options: Dict[str, str] = {}
    data: Optional[str] = None
    i, n = 0, len(rest)
    while i < n:
        if rest[i] == " ":
            i += 1
            continue
        if rest[i] != "-" or i + 1 >= n:
            raise _CommandError(E_PARSE, f"expected an option at {rest[i : i + 20]!r}")
        letter = rest[i + 1]
        if letter == "-":
            data = rest[i + 2 :].strip()
            break
        if not (i + 2 == n or rest[i + 2] == " "):
            raise _CommandError(E_PARSE, f"bad option {rest[i : i + 20]!r}")
        i += 3
        if i < n and rest[i] == '"':
            value, i = _quoted(rest, i)
        else:
            end = rest.find(" ", i)
            end = n if end < 0 else end
            value, i = rest[i:end], end
        if letter in options:
            raise _CommandError(E_DUPLICATE, f"option -{letter} given twice")
        options[letter] = value
    return name, options, data


def _quoted(text: str, i: int) -> Tuple[str, int]:
    """The value quoted at text[i] (backslash escapes as in DBGP 6.3.1) and
    the index after its closing quote."""
    out: List[str] = []
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append("\0" if nxt == "0" else nxt)
            i += 2
        elif c == '"':
            return "".join(out), i + 1
        else:
            out.append(c)
            i += 1
    raise _CommandError(E_PARSE, "unterminated quoted value")


def _b64decode(data: str) -> str:
    """DBGP's base64 data as text; IDEs wrap it with newlines."""
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise _CommandError(E_PARSE, f"data is not base64: {e}") from None
    return raw.decode("utf-8", "replace")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "replace")).decode("ascii")


def _attrs(**attributes: object) -> str:
    """XML attributes; a trailing underscore is dropped from a name and a
    double underscore is a colon (xdebug__message)."""
    parts = []
    for name, value in attributes.items():
        if value is None:
            continue
        name = name.rstrip("_").replace("__", ":")
        parts.append(f" {name}={quoteattr(_xml_text(str(value)), _ATTRIBUTE_ENTITIES)}")
    return "".join(parts)


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Attribute values keep their whitespace only as character references.
_ATTRIBUTE_ENTITIES = {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}


def _xml_text(text: str) -> str:
    """Text with the characters XML 1.0 cannot hold replaced by "?"."""
    return _NOT_XML.sub("?", text)


def file_uri(path: str) -> str:
    """A file URI for a path (absolute paths only; others pass as they are,
    e.g. "<string>")."""
    if not os.path.isabs(path):
        return path
    return "file://" + urllib.parse.quote(path)


def uri_path(uri: str) -> str:
    """The path of a file URI (a plain path is returned as it is)."""
    if uri.startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    return uri


class _Wire:
    """One connection to the IDE: packets out (length, NUL, XML, NUL) and
    NUL-terminated commands in. Sends are serialised: the reader thread and
    the debugged thread both answer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()
        self.closed = False

    def send(self, xml: str) -> bool:
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n' + xml).encode("utf-8")
        packet = str(len(body)).encode("ascii") + b"\0" + body + b"\0"
        with self._lock:
            if self.closed:
                return False
            try:
                self.sock.sendall(packet)
                return True
            except OSError:
                self._close_locked()
                return False

    def commands(self) -> Iterator[str]:
        """The IDE's commands until it closes the connection."""
        buffer = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                line, buffer = buffer.split(b"\0", 1)
                yield line.decode("utf-8", "replace")

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# --- values as DBGP properties ----------------------------------------------

# (language type name, DBGP common type, XML schema type), most specific first.
_TYPES: Sequence[Tuple[type, str, str, Optional[str]]] = (
    (bool, "bool", "bool", "xsd:boolean"),
    (int, "int", "int", "xsd:decimal"),
    (float, "float", "float", "xsd:double"),
    (str, "str", "string", "xsd:string"),
    (bytes, "bytes", "string", None),
    (type(None), "None", "null", None),
    (list, "list", "array", None),
    (tuple, "tuple", "array", None),
    (dict, "dict", "hash", None),
    (object, "object", "object", None),
)
_LITERAL_KEYS = (str, int, float, bool, bytes, type(None))

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxstring = 200
_repr.maxother = 200
for _name in ("maxtuple", "maxlist", "maxarray", "maxdict", "maxset", "maxfrozenset", "maxdeque"):
    setattr(_repr, _name, 20)


def _type_name(value: object) -> str:
    for cls, name, _, _ in _TYPES:
        if isinstance(value, cls):
            return name
    return "object"


def _class_name(value: object) -> str:
    cls = type(value)
    if cls.__module__ in ("builtins", None):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _value_text(value: object) -> str:
    if type(value) is str:
        return value
    try:
        return _repr.repr(value)
    except BaseException as e:  # a broken __repr__ is the program's, not ours
        return f"<repr failed: {type(e).__name__}: {e}>"


def _children(
    value: object, fullname: str, hidden: bool
) -> Optional[Tuple[int, Callable[[int, int], List[Tuple[str, str, object]]]]]:
    """(number of children, page(start, stop) -> [(name, fullname, value)])
    of a value that has any, else None. Nothing is iterated that could run
    the program's code (generators, iterators)."""
    if isinstance(value, (str, bytes, bytearray, int, float, complex, type(None))):
        return None
    if isinstance(value, dict):
        d = value

        def dict_page(start: int, stop: int) -> List[Tuple[str, str, object]]:
            out = []
            for i, (k, v) in enumerate(itertools.islice(d.items(), start, stop), start):
                if type(k) in _LITERAL_KEYS:
                    out.append((repr(k), f"{fullname}[{k!r}]", v))
                else:
                    out.append((_value_text(k), f"list({fullname}.values())[{i}]", v))
            return out

        return len(d), dict_page
    if isinstance(value, (list, tuple, set, frozenset)):
        # A set's items are reached through list(set), in its own order.
        indexable = isinstance(value, (list, tuple))
        items = value if indexable else list(value)
        base = fullname if indexable else f"list({fullname})"
        return len(items), lambda start, stop: [
            (str(i), f"{base}[{i}]", items[i]) for i in range(start, min(stop, len(items)))
        ]
    try:
        names = [n for n in vars(value) if isinstance(n, str)]
    except TypeError:
        names = []
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in [slots] if isinstance(slots, str) else slots:
            if (
                slot not in names
                and slot not in ("__dict__", "__weakref__")
                and hasattr(value, slot)
            ):
                names.append(slot)
    if not hidden:
        names = [n for n in names if not (n.startswith("__") and n.endswith("__"))]
    if not names:
        return None

    def attribute_page(start: int, stop: int) -> List[Tuple[str, str, object]]:
        out = []
        for n in names[start:stop]:
            try:
                v = getattr(value, n)
            except BaseException as e:
                v = e
            full = f"{fullname}.{n}" if n.isidentifier() else f"getattr({fullname}, {n!r})"
            out.append((n, full, v))
        return out

    return len(names), attribute_page


# --- breakpoints -------------------------------------------------------------


class _Breakpoint:
    """One breakpoint as breakpoint_set made it."""

    __slots__ = (
        "id",
        "type",
        "state",
        "path",
        "uri",
        "lineno",
        "function",
        "exception",
        "expression",
        "code",
        "hit_value",
        "hit_condition",
        "hit_count",
        "temporary",
    )

    def __init__(self, bp_id: str, bp_type: str) -> None:
        self.id = bp_id
        self.type = bp_type
        self.state = "enabled"
        self.path: Optional[str] = None
        self.uri: Optional[str] = None
        self.lineno: Optional[int] = None
        self.function: Optional[str] = None
        self.exception: Optional[str] = None
        self.expression: Optional[str] = None
        self.code: Optional[types.CodeType] = None
        self.hit_value = 0
        self.hit_condition = ">="
        self.hit_count = 0
        self.temporary = False

    def hit(self) -> bool:
        """Count a hit; whether it stops, per hit_value and hit_condition."""
        self.hit_count += 1
        if self.hit_value <= 0:
            return True
        if self.hit_condition == "==":
            return self.hit_count == self.hit_value
        if self.hit_condition == "%":
            return self.hit_count % self.hit_value == 0
        return self.hit_count >= self.hit_value

    def xml(self) -> str:
        expression = (
            f"<expression>{escape(_xml_text(self.expression))}</expression>"
            if self.expression is not None
            else ""
        )
        return (
            "<breakpoint"
            + _attrs(
                id=self.id,
                type=self.type,
                state=self.state,
                filename=self.uri,
                lineno=self.lineno,
                function=self.function,
                exception=self.exception,
                hit_value=self.hit_value,
                hit_condition=self.hit_condition,
                hit_count=self.hit_count,
                temporary=int(self.temporary),
            )
            + f">{expression}</breakpoint>"
        )


_breakpoint_ids = itertools.count(1)
_code_lines_cache: Dict[str, Tuple[float, Optional[frozenset]]] = {}


def _code_lines(path: str) -> Optional[frozenset]:
    """The lines of a source file where a line event can happen (where a
    breakpoint can stop), or None when the file cannot be read or compiled."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    cached = _code_lines_cache.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    lines: Optional[frozenset] = None
    try:
        with io.open_code(path) as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        pass
    else:
        found = set()
        pending = [code]
        while pending:
            c = pending.pop()
            found.update(line for _, line in dis.findlinestarts(c) if line is not None)
            pending.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        lines = frozenset(found)
    _code_lines_cache[path] = (mtime, lines)
    return lines


def _outermost(frame: types.FrameType) -> bool:
    """Whether nothing but hidden frames (the threading module's) lies
    below ``frame``."""
    caller = frame.f_back
    while caller is not None:
        if not _hidden(caller.f_code.co_filename):
            return False
        caller = caller.f_back
    return True


_OPCODES = dis.opmap
_GENERATOR_FLAGS = (
    inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)


def _resumed(frame: types.FrameType) -> bool:
    """Whether a call event goes on with a generator or coroutine (after a
    yield or an await) rather than starting it: RESUME's operand says so on
    3.11+, a started frame's f_lasti before."""
    code = frame.f_code
    if not code.co_flags & _GENERATOR_FLAGS or frame.f_lasti < 0:
        return False
    if "RESUME" not in _OPCODES:
        return True
    raw = code.co_code
    return raw[frame.f_lasti] == _OPCODES["RESUME"] and raw[frame.f_lasti + 1] & 3 != 0


def _suspended(frame: types.FrameType) -> bool:
    """Whether a return event suspends a generator or coroutine (a yield or
    an await) rather than ending it. Where f_lasti points then: YIELD_VALUE;
    on 3.9 and 3.10 an await stands just before its YIELD_FROM; on 3.13 at
    the RESUME that follows the yield."""
    code = frame.f_code
    if not code.co_flags & _GENERATOR_FLAGS or frame.f_lasti < 0:
        return False
    raw = code.co_code
    i = frame.f_lasti
    if raw[i] == _OPCODES["YIELD_VALUE"]:
        return True
    if "YIELD_FROM" in _OPCODES:
        return raw[i] == _OPCODES["YIELD_FROM"] or (
            i + 2 < len(raw) and raw[i + 2] == _OPCODES["YIELD_FROM"]
        )
    return sys.version_info >= (3, 13) and raw[i] == _OPCODES["RESUME"]


def _hidden(filename: str) -> bool:
    return filename in _HIDDEN_FILES or filename.startswith(_HIDDEN_PREFIXES)


_realpaths: Dict[str, str] = {}


def _real(filename: str) -> str:
    path = _realpaths.get(filename)
    if path is None:
        path = os.path.realpath(filename) if os.path.isabs(filename) else filename
        _realpaths[filename] = path
    return path


def _function_names(frame: types.FrameType) -> Sequence[str]:
    """The names a call or return breakpoint may give a frame's function
    by: its name, its qualified name, and that with its module's name."""
    code = frame.f_code
    qualname = getattr(code, "co_qualname", code.co_name)
    module = frame.f_globals.get("__name__", "")
    return list(dict.fromkeys((code.co_name, qualname, f"{module}.{qualname}")))


# --- the session ---------------------------------------------------------------

_sessions: Dict[int, "Session"] = {}
_sessions_lock = threading.Lock()
_GONE = object()


class Session:
    """One DBGP session: a connection to the IDE and the thread it debugs.

    Made by :meth:`open` (connects and sends ``init``); then :meth:`call`
    runs a function under it in this thread, or :func:`connect` stops at
    its caller. The IDE's commands are read by a reader thread; while the
    debugged thread is stopped it takes them from a queue and runs them
    itself, so that ``eval`` sees the thread's context variables and
    thread-locals.
    """

    def __init__(self, wire: _Wire, thread: threading.Thread) -> None:
        self._wire = wire
        self.thread_ident = thread.ident
        self.state = "starting"
        self.reason = "ok"
        self.max_children = 32
        self.max_data = 1024
        self.max_depth = 1
        self.show_hidden = 0
        self.multiple_sessions = 0
        self.notify_ok = 0
        self.streams = {"stdout": 0, "stderr": 0}
        self.breakpoints: Dict[str, _Breakpoint] = {}
        self._line_index: Dict[Tuple[str, int], List[_Breakpoint]] = {}
        self._file_conditions: Dict[str, List[_Breakpoint]] = {}
        self._function_bps: Dict[str, List[_Breakpoint]] = {}
        self._exception_bps: List[_Breakpoint] = []
        self._bp_files: frozenset = frozenset()
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._pending: Optional[Tuple[str, str]] = None
        self._mode = "run"
        self._step_frame: Optional[types.FrameType] = None
        self._entry_frame: Optional[types.FrameType] = None
        self._break_requested = False
        self._stop_requested = False
        self._active = True  # false once detached, stopped or the IDE is gone
        self._frame: Optional[types.FrameType] = None
        self._exception: Optional[BaseException] = None
        self._boundary: Optional[types.FrameType] = None
        # Whether the first step_into stops at module-level code only (the
        # runner's script, not the standard library its runner calls first).
        self.entry_module = False
        self._reader: Optional[threading.Thread] = None
        # The reader checks the state and queues a command under this lock,
        # and the debugged thread resumes under it: a command is either
        # queued before the thread resumes (and answered by it) or answered
        # by the reader.
        self._state_lock = threading.Lock()
        self._heard = False  # a command came from the IDE

    # ---- lifecycle

    @classmethod
    def open(
        cls,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        idekey: Optional[str] = None,
        fileuri: str = "",
        timeout: float = CONNECT_TIMEOUT,
    ) -> "Session":
        """Connect to the IDE listening at host:port, send ``init`` and
        return the session, in state ``starting``, for this thread. Raises
        OSError when no IDE answers within ``timeout`` seconds."""
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # An IDE whose machine went away is noticed within about two
        # minutes; one that stops reading, at the next send.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
            if hasattr(socket, option):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", SEND_TIMEOUT, 0))
        session = cls(_Wire(sock), threading.current_thread())
        if idekey is None:
            idekey = os.environ.get("DBGP_IDEKEY", "")
        from samprof import __version__

        init = (
            f'<init xmlns="{_NS}" xmlns:xdebug="{_XDEBUG_NS}"'
            + _attrs(
                fileuri=fileuri,
                language="Python",
                xdebug__language_version=".".join(map(str, sys.version_info[:3])),
                protocol_version=_PROTOCOL_VERSION,
                appid=os.getpid(),
                idekey=idekey,
                session=os.environ.get("DBGP_COOKIE"),
                thread=threading.get_native_id(),
            )
            + f'><engine version="{__version__}">samprof</engine></init>'
        )
        if not session._wire.send(init):
            raise ConnectionError(f"the IDE at {host}:{port} closed the connection")
        with _sessions_lock:
            _sessions[threading.get_ident()] = session
        session._reader = threading.Thread(
            target=session._read, name="samprof.debug reader", daemon=True
        )
        session._reader.start()
        return session

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function(*args, **kwargs)`` in this thread under the
        debugger and return what it returns. First waits, in state
        ``starting``, for the IDE's first continuation command (the IDE
        sets its breakpoints before it); ``step_into`` then stops at the
        first line of the program's code. When the function ends the
        session goes to ``stopping`` and waits for the IDE to end it.
        Raises Stopped when the IDE stopped the program."""
        self._boundary = sys._getframe()
        if not self._start():
            return function(*args, **kwargs)
        previous = sys.gettrace()
        sys.settrace(self._trace_call)
        failed = False
        try:
            return function(*args, **kwargs)
        except Stopped:
            raise
        except BaseException:
            failed = True
            raise
        finally:
            sys.settrace(previous)
            self._finish("error" if failed else "ok")

    def _finish(self, reason: str) -> None:
        """The traced code has ended: answer the pending continuation with
        ``stopping`` and serve the IDE until it stops or detaches."""
        self._frame = None
        if self._active and not self._stop_requested:
            self.state = "stopping"
            self.reason = reason
            self._answer_continuation()
            self._interact()
        self._end()

    def _start(self) -> bool:
        """Serve the IDE in state ``starting`` until it resumes: True, or
        False when the session ended there (detach, the IDE gone); raises
        Stopped after ``stop``."""
        self._interact()
        if self._stop_requested:
            self._end()
            raise Stopped
        if not self._active:
            self._end()
            return False
        return True

    def _end(self) -> None:
        self._active = False
        self._wire.close()
        with _sessions_lock:
            if _sessions.get(self.thread_ident) is self:
                del _sessions[self.thread_ident]

    def _read(self) -> None:
        """The reader thread: queue the IDE's commands for the debugged
        thread, or answer them itself while that thread runs."""
        try:
            for line in self._wire.commands():
                self._heard = True
                try:
                    name, options, data = parse_command(line)
                except _CommandError as e:
                    self._send_error(line.split(" ", 1)[0], _transaction_of(line), e)
                    continue
                with self._state_lock:
                    running = self.state == "running"
                    if not running:
                        self._queue.put((name, options, data))
                if running:
                    self._answer_while_running(name, options, data)
        except Exception:
            log.exception("samprof.debug: the session's reader failed; the program goes on")
            self._wire.close()
        finally:
            self._queue.put(_GONE)
            if self.state == "running" and not self._stop_requested:
                self._active = False

    # ---- tracing

    def _trace_call(
        self, frame: types.FrameType, event: str, arg: Any
    ) -> Optional[Callable[..., Any]]:
        """The thread's trace function, called at each new frame: trace the
        frames that stepping or a breakpoint needs, leave the rest alone."""
        code = frame.f_code
        if _hidden(code.co_filename):
            return None
        if self._stop_requested:
            self._stopped()
        if not self._active:
            self._untrace()
            return None
        try:
            local = (
                self._mode == "step_into"
                or frame is self._step_frame
                or _real(code.co_filename) in self._bp_files
            )
            if self._function_bps and not _resumed(frame):
                for name in _function_names(frame):
                    for bp in self._function_bps.get(name, ()):
                        if bp.state != "enabled":
                            continue
                        local = True
                        if bp.type == "call" and bp.hit():
                            self._entry_frame = frame
                            if bp.temporary:
                                self._remove(bp.id)
            if local:
                return self._trace_frame
            if self._exception_bps:
                frame.f_trace_lines = False
                return self._trace_frame
        except Exception:
            self._internal_error()
        return None

    def _trace_frame(
        self, frame: types.FrameType, event: str, arg: Any
    ) -> Optional[Callable[..., Any]]:
        """The trace function of a traced frame."""
        if self._stop_requested:
            self._stopped()
        if not self._active:
            frame.f_trace = None
            return None
        try:
            if event == "line":
                if self._should_stop(frame):
                    self._stop(frame, "ok")
            elif event == "return" and not _suspended(frame):
                if self._function_bps and self._return_breakpoint(frame):
                    self._stop(frame, "ok")
                if frame is self._step_frame:
                    # Also when a step began at this return event.
                    self._returned(frame)
                if self._boundary is None and _outermost(frame):
                    # connect()'s session ends with its thread's code.
                    self._finish("ok")
                    self._untrace()
            elif event == "exception":
                exception = arg[1]
                if (
                    self._exception_bps
                    and arg[2].tb_next is None
                    and self._exception_breakpoint(arg[0])
                ):
                    self._stop(frame, "exception", exception)
        except Stopped:
            raise
        except Exception:
            self._internal_error()
            frame.f_trace = None
            return None
        if self._stop_requested:
            self._stopped()
        if not self._active:
            frame.f_trace = None
            return None
        return self._trace_frame

    def _returned(self, frame: types.FrameType) -> None:
        """The frame being stepped over or out of returned: the step goes on
        as a step over its caller (stop at the caller's next line), or, when
        no caller of the program's is left, at the next line anywhere."""
        caller = frame.f_back
        while caller is not None and caller is not self._boundary:
            if not _hidden(caller.f_code.co_filename):
                if caller.f_trace is None:
                    caller.f_trace = self._trace_frame
                caller.f_trace_lines = True
                self._step_frame = caller
                self._mode = "step_over"
                return
            caller = caller.f_back
        self._step_frame = None
        self._mode = "step_into"

    def _stopped(self) -> None:
        """The IDE sent stop: end the thread's code here."""
        self._stop_requested = False
        self._active = False
        self._untrace()
        raise Stopped

    def _should_stop(self, frame: types.FrameType) -> bool:
        if self._break_requested:
            self._break_requested = False
            return True
        mode = self._mode
        if mode == "step_into" and (not self.entry_module or frame.f_code.co_name == "<module>"):
            self.entry_module = False
            return True
        if mode == "step_over" and frame is self._step_frame:
            return True
        if frame is self._entry_frame:
            self._entry_frame = None
            return True
        code = frame.f_code
        path = _real(code.co_filename)
        if path not in self._bp_files:
            return False
        stop = False
        candidates = self._line_index.get((path, frame.f_lineno), []) + self._file_conditions.get(
            path, []
        )
        for bp in candidates:
            if bp.state != "enabled":
                continue
            if bp.code is not None and not self._condition(bp.code, frame):
                continue
            if bp.hit():
                stop = True
                if bp.temporary:
                    self._remove(bp.id)
        return stop

    def _condition(self, code: types.CodeType, frame: types.FrameType) -> bool:
        try:
            return bool(eval(code, frame.f_globals, frame.f_locals))
        except BaseException:  # the IDE's expression; it fails as False
            return False

    def _return_breakpoint(self, frame: types.FrameType) -> bool:
        stop = False
        for name in _function_names(frame):
            for bp in self._function_bps.get(name, ()):
                if bp.type == "return" and bp.state == "enabled" and bp.hit():
                    stop = True
                    if bp.temporary:
                        self._remove(bp.id)
        return stop

    def _exception_breakpoint(self, cls: type) -> bool:
        names = set()
        for base in cls.__mro__:
            names.add(base.__name__)
            names.add(f"{base.__module__}.{base.__qualname__}")
        stop = False
        for bp in list(self._exception_bps):
            if (
                bp.state == "enabled"
                and (bp.exception == "*" or bp.exception in names)
                and bp.hit()
            ):
                stop = True
                if bp.temporary:
                    self._remove(bp.id)
        return stop

    def _stop(
        self, frame: types.FrameType, reason: str, exception: Optional[BaseException] = None
    ) -> None:
        """Stop here: tell the IDE (the answer to its continuation) and run
        its commands until it resumes."""
        self._frame = frame
        self._exception = exception
        self.entry_module = False
        self._break_requested = False
        self._mode = "run"
        self._step_frame = None
        self.state = "break"
        self.reason = reason
        self._answer_continuation()
        self._interact()
        self._frame = None
        self._exception = None

    def _arm(self, frame: Optional[types.FrameType]) -> None:
        """Trace every frame of the stack from ``frame`` down to the
        session's boundary, so that stepping sees lines in the callers."""
        while frame is not None and frame is not self._boundary:
            if not _hidden(frame.f_code.co_filename):
                frame.f_trace = self._trace_frame
                frame.f_trace_lines = True
            frame = frame.f_back

    def _disarm(self, frame: Optional[types.FrameType]) -> None:
        while frame is not None and frame is not self._boundary:
            if frame.f_trace is not None and getattr(frame.f_trace, "__self__", None) is self:
                frame.f_trace = None
            frame = frame.f_back

    def _internal_error(self) -> None:
        """A bug here must not become the program's exception: log it and
        let the program go on without the debugger."""
        log.exception("samprof.debug: internal error; the session is detached")
        self._active = False
        self._wire.close()

    # ---- the IDE's commands

    def _interact(self) -> None:
        """Run the IDE's commands until one resumes execution (or ends the
        session)."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                item = self._queue.get(
                    timeout=None if self._heard else max(0.0, deadline - time.monotonic())
                )
            except queue.Empty:
                if self._heard:
                    continue
                log.warning(
                    "samprof.debug: the IDE sent no command in %.0f s; going on without it",
                    START_TIMEOUT,
                )
                self._detach()
                self._wire.close()
                return
            if item is _GONE:
                self._gone()
                return
            name, options, data = item
            if self._command(name, options, data):
                # Commands that were queued after the continuation are
                # answered as they would be while running.
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        return
                    if item is _GONE:
                        self._queue.put(item)
                        return
                    self._answer_while_running(*item)
            if not self._active:
                return

    def _gone(self) -> None:
        """The IDE closed the connection: the program goes on undebugged."""
        if self._active:
            log.warning("samprof.debug: the IDE closed the connection; the program goes on")
        self._detach()

    def _detach(self) -> None:
        self._active = False
        if threading.get_ident() == self.thread_ident:
            self._disarm(self._frame)
            self._untrace()

    def _untrace(self) -> None:
        """Remove this session's trace function from the thread (and
        leave anyone else's)."""
        if sys.gettrace() == self._trace_call:
            sys.settrace(None)

    def _answer_while_running(
        self, name: str, options: Dict[str, str], data: Optional[str]
    ) -> None:
        """The commands DBGP allows while the program runs (async): status,
        break, and the ones that touch no frame."""
        txid = options.get("i", "")
        try:
            if name == "break":
                self._break_requested = True
                self._arm_thread()
                self._send_response(name, txid, success=1)
            elif name == "stop":
                self._stop_requested = True
                self._arm_thread()
                self._send_response(name, txid, status="stopped", reason="ok")
                self._wire.close()
            elif name == "detach":
                self._active = False
                self._send_response(name, txid, status="stopped", reason="ok")
                self._wire.close()
            elif name in _ANYTIME:
                self._send_raw(_ANYTIME[name](self, name, txid, options, data))
                if name.startswith("breakpoint_"):
                    # Frames already running were traced, or not, for the
                    # breakpoints they knew of when they started.
                    self._arm_thread()
            else:
                raise _CommandError(E_STATE, f"{name} is not available while the program runs")
        except _CommandError as e:
            self._send_error(name, txid, e)
        except Exception as e:
            log.exception("samprof.debug: %s failed", name)
            self._send_error(name, txid, _CommandError(E_INTERNAL, f"{type(e).__name__}: {e}"))

    def _arm_thread(self) -> None:
        """Make the running thread stop at its next line (break, stop)."""
        frame = sys._current_frames().get(self.thread_ident)
        self._arm(frame)

    def _command(self, name: str, options: Dict[str, str], data: Optional[str]) -> bool:
        """Run one command in the debugged thread; True when it resumed
        execution."""
        txid = options.get("i", "")
        try:
            if not txid:
                raise _CommandError(E_OPTIONS, "missing -i transaction_id")
            if name in _CONTINUATIONS:
                return self._continue(name, txid)
            if name in ("stop", "detach"):
                self._send_response(name, txid, status="stopped", reason="ok")
                if name == "stop" and self.state in ("break", "starting"):
                    self._stop_requested = True
                self._detach()
                self._wire.close()
                return True
            if name == "break":
                raise _CommandError(E_STATE, "the program is not running")
            handler = _ANYTIME.get(name) or _STOPPED.get(name)
            if handler is None:
                raise _CommandError(E_UNIMPLEMENTED, f"unimplemented command: {name}")
            self._send_raw(handler(self, name, txid, options, data))
        except _CommandError as e:
            self._send_error(name, txid, e)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # nothing the IDE does may reach the program
            log.exception("samprof.debug: %s failed", name)
            self._send_error(name, txid, _CommandError(E_INTERNAL, f"{type(e).__name__}: {e}"))
        return False

    def _continue(self, name: str, txid: str) -> bool:
        if self.state == "stopping":
            # Nothing left to run: the session ends.
            self._send_response(name, txid, status="stopped", reason=self.reason)
            self._detach()
            self._wire.close()
            return True
        self._pending = (name, txid)
        frame = self._frame
        if name == "step_into" or (self.state == "starting" and name == "step_over"):
            self._mode = "step_into"
        elif name in ("step_over", "step_out") and frame is not None:
            self._mode = name
            self._step_frame = frame
        else:
            self._mode = "run"
        if frame is not None:
            self._arm(frame)
        with self._state_lock:
            self.state = "running"
        return True

    def _answer_continuation(self) -> None:
        if self._pending is None:
            return
        name, txid = self._pending
        self._pending = None
        message = ""
        if self.state == "break" and self._frame is not None:
            exception = self._exception
            text = escape(_xml_text(str(exception))) if exception is not None else ""
            message = (
                "<xdebug:message"
                + _attrs(
                    filename=file_uri(self._frame.f_code.co_filename),
                    lineno=self._frame.f_lineno,
                    exception=type(exception).__name__ if exception is not None else None,
                )
                + f">{text}</xdebug:message>"
            )
        self._send_raw(
            _response(name, txid, xmlns__xdebug=_XDEBUG_NS, status=self.state, reason=self.reason)
            + message
            + "</response>"
        )

    # ---- sending

    def _send_raw(self, xml: str) -> None:
        if not self._wire.send(xml) and self._active:
            self._queue.put(_GONE)

    def _send_response(self, name: str, txid: str, **attributes: object) -> None:
        self._send_raw(_response(name, txid, **attributes) + "</response>")

    def _send_error(self, name: str, txid: str, error: _CommandError) -> None:
        message = escape(_xml_text(error.message))
        self._send_raw(
            _response(name, txid)
            + f'<error code="{error.code}"><message>{message}</message></error>'
            + "</response>"
        )

    def send_stream(self, kind: str, text: str) -> None:
        """Output of the debugged thread, to the IDE (stdout/stderr -c 1|2)."""
        if self._active and self.state == "running":
            self._wire.send(
                f'<stream xmlns="{_NS}"'
                + _attrs(type=kind, encoding="base64")
                + f">{_b64(text)}</stream>"
            )

    # ---- breakpoints

    def _index(self) -> None:
        """Rebuild the lookup tables the trace functions read (replaced
        whole, so the reader thread can change breakpoints meanwhile)."""
        lines: Dict[Tuple[str, int], List[_Breakpoint]] = {}
        files: Dict[str, List[_Breakpoint]] = {}
        functions: Dict[str, List[_Breakpoint]] = {}
        exceptions: List[_Breakpoint] = []
        for bp in list(self.breakpoints.values()):
            if bp.type in ("line", "conditional") and bp.path is not None:
                if bp.lineno is None:
                    files.setdefault(bp.path, []).append(bp)
                else:
                    lines.setdefault((bp.path, bp.lineno), []).append(bp)
            elif bp.type in ("call", "return") and bp.function is not None:
                functions.setdefault(bp.function, []).append(bp)
            elif bp.type == "exception":
                exceptions.append(bp)
        self._line_index = lines
        self._file_conditions = files
        self._function_bps = functions
        self._exception_bps = exceptions
        self._bp_files = frozenset([path for path, _ in lines] + list(files))

    def _remove(self, bp_id: str) -> None:
        self.breakpoints.pop(bp_id, None)
        self._index()

    # ---- frames

    def _frames(self) -> List[types.FrameType]:
        """The stack the IDE sees, innermost first."""
        out = []
        frame = self._frame
        while frame is not None and frame is not self._boundary:
            if not _hidden(frame.f_code.co_filename):
                out.append(frame)
            frame = frame.f_back
        return out

    def _frame_at(self, options: Dict[str, str]) -> types.FrameType:
        if self._frame is None:
            raise _CommandError(E_STATE, f"no stack in state {self.state}")
        frames = self._frames()
        depth = _int_option(options, "d", 0)
        if not 0 <= depth < len(frames):
            raise _CommandError(E_DEPTH, f"stack depth {depth} is invalid (depth {len(frames)})")
        return frames[depth]

    def _scope(self, options: Dict[str, str]) -> Tuple[types.FrameType, int]:
        frame = self._frame_at(options)
        context = _int_option(options, "c", 0)
        if context not in (0, 1):
            raise _CommandError(E_CONTEXT, f"context {context} is invalid")
        return frame, context

    def _evaluate(self, frame: types.FrameType, context: int, expression: str) -> object:
        namespace = frame.f_globals if context == 1 else frame.f_locals
        return eval(expression, frame.f_globals, namespace)

    def _property(
        self,
        name: str,
        fullname: str,
        value: object,
        depth: int,
        page: int = 0,
        max_data: Optional[int] = None,
    ) -> str:
        """A <property> element with the value's children to ``depth``
        more levels (only its first page below the top)."""
        text = _value_text(value).encode("utf-8", "replace")
        size = len(text)
        limit = self.max_data if max_data is None else max_data
        if limit > 0 and size > limit:
            text = text[:limit]
        children = _children(value, fullname, bool(self.show_hidden))
        attributes: Dict[str, object] = dict(
            name=name,
            fullname=fullname,
            type=_type_name(value),
            classname=_class_name(value),
            constant=0,
            children=int(bool(children and children[0])),
            size=size,
            encoding="base64",
        )
        inner = ""
        if children is not None and children[0]:
            count, page_of = children
            attributes["numchildren"] = count
            if depth > 0 and self.max_children > 0:
                attributes["page"] = page
                attributes["pagesize"] = self.max_children
                start = page * self.max_children
                inner = "".join(
                    self._property(n, f, v, depth - 1)
                    for n, f, v in page_of(start, start + self.max_children)
                )
        encoded = base64.b64encode(text).decode("ascii")
        return f"<property{_attrs(**attributes)}>{encoded}{inner}</property>"


_TRANSACTION = re.compile(r"\s-i\s+(\d+)")


def _transaction_of(line: str) -> str:
    """The transaction id of a command that cannot be parsed, to answer it
    with its error."""
    found = _TRANSACTION.search(line)
    return found.group(1) if found else ""


def _response(name: str, txid: str, **attributes: object) -> str:
    return (
        f'<response xmlns="{_NS}"' + _attrs(command=name, transaction_id=txid, **attributes) + ">"
    )


def _int_option(options: Dict[str, str], letter: str, default: int) -> int:
    value = options.get(letter)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise _CommandError(E_OPTIONS, f"-{letter} {value!r} is not a number") from None


def _required(options: Dict[str, str], letter: str, what: str) -> str:
    value = options.get(letter)
    if value is None:
        raise _CommandError(E_OPTIONS, f"missing -{letter} {what}")
    return value


# --- command handlers: (session, name, txid, options, data) -> XML ---------------

_FEATURES_READ_ONLY = {
    "language_supports_threads": "1",
    "language_name": "Python",
    "language_version": sys.version.split()[0],
    "protocol_version": "1",
    "supports_async": "1",
    "data_encoding": "base64",
    "breakpoint_languages": "Python",
    "breakpoint_types": " ".join(_BREAKPOINT_TYPES),
    "supported_encodings": "UTF-8",
    "supports_postmortem": "0",
    "breakpoint_details": "0",
    "extended_properties": "0",
    "resolved_breakpoints": "0",
}
_FEATURES_SETTABLE = (
    "max_children",
    "max_data",
    "max_depth",
    "show_hidden",
    "multiple_sessions",
    "notify_ok",
)


def _status(s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]) -> str:
    return _response(name, txid, status=s.state, reason=s.reason) + "</response>"


def _feature_get(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    feature = _required(options, "n", "feature name")
    if feature == "encoding":
        value: Optional[str] = "UTF-8"
    elif feature in _FEATURES_READ_ONLY:
        value = _FEATURES_READ_ONLY[feature]
    elif feature in _FEATURES_SETTABLE:
        value = str(getattr(s, feature))
    elif feature in _COMMAND_NAMES:
        value = "1"
    else:
        value = None
    supported = int(value is not None)
    return (
        _response(name, txid, feature_name=feature, supported=supported)
        + escape(value or "")
        + "</response>"
    )


def _feature_set(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    feature = _required(options, "n", "feature name")
    value = _required(options, "v", "value")
    if feature == "encoding":
        if value.upper().replace("_", "-") not in ("UTF-8", "UTF8"):
            raise _CommandError(E_ENCODING, f"encoding {value} is not supported (UTF-8 is)")
        success = 1
    elif feature in _FEATURES_SETTABLE:
        try:
            number = int(value)
        except ValueError:
            raise _CommandError(E_OPTIONS, f"{feature} must be a number, not {value!r}") from None
        if number < 0:
            raise _CommandError(E_OPTIONS, f"{feature} must not be negative")
        setattr(s, feature, number)
        success = 1
    elif feature in _FEATURES_READ_ONLY or feature in _COMMAND_NAMES:
        success = 0
    else:
        raise _CommandError(E_OPTIONS, f"unknown feature {feature}")
    return _response(name, txid, feature=feature, success=success) + "</response>"


def _typemap_get(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    maps = "".join(
        "<map" + _attrs(type=common, name=language, xsi__type=schema) + "/>"
        for _, language, common, schema in _TYPES
    )
    return (
        _response(
            name,
            txid,
            xmlns__xsi="http://www.w3.org/2001/XMLSchema-instance",
            xmlns__xsd="http://www.w3.org/2001/XMLSchema",
        )
        + maps
        + "</response>"
    )


def _breakpoint_set(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    bp_type = _required(options, "t", "type")
    if bp_type not in _BREAKPOINT_TYPES:
        raise _CommandError(E_BREAKPOINT_TYPE, f"breakpoint type {bp_type} is not supported")
    bp = _Breakpoint(str(next(_breakpoint_ids)), bp_type)
    _update_breakpoint(bp, options)
    if bp_type in ("line", "conditional"):
        bp.uri = _required(options, "f", "file")
        path = uri_path(bp.uri)
        if "\0" in path:
            raise _CommandError(E_BREAKPOINT_INVALID, "a file name cannot hold a NUL")
        bp.path = _real(path)
        if "n" in options:
            bp.lineno = _int_option(options, "n", 0)
        elif bp_type == "line":
            raise _CommandError(E_OPTIONS, "missing -n line")
        if bp.lineno is not None:
            _check_line(bp.path, bp.lineno)
    if bp_type == "conditional":
        if not data:
            raise _CommandError(E_OPTIONS, "a conditional breakpoint needs an expression")
    if data:
        bp.expression = _b64decode(data)
        try:
            bp.code = compile(bp.expression, "<breakpoint condition>", "eval")
        except (SyntaxError, ValueError) as e:
            raise _CommandError(E_EXPRESSION, f"invalid expression: {e}") from None
    if bp_type in ("call", "return"):
        bp.function = _required(options, "m", "function")
    if bp_type == "exception":
        bp.exception = _required(options, "x", "exception")
    bp.temporary = options.get("r", "0") == "1"
    s.breakpoints[bp.id] = bp
    s._index()
    return _response(name, txid, id=bp.id, state=bp.state) + "</response>"


def _check_line(path: str, lineno: int) -> None:
    if lineno <= 0:
        raise _CommandError(E_BREAKPOINT_INVALID, f"line {lineno} is invalid")
    lines = linecache.getlines(path)
    if lines and lineno > len(lines):
        raise _CommandError(E_BREAKPOINT_INVALID, f"{path} has {len(lines)} lines, not {lineno}")
    code_lines = _code_lines(path)
    if code_lines is not None and lineno not in code_lines:
        raise _CommandError(E_BREAKPOINT_NO_CODE, f"no code on line {lineno} of {path}")


def _update_breakpoint(bp: _Breakpoint, options: Dict[str, str]) -> None:
    state = options.get("s")
    if state is not None:
        if state not in ("enabled", "disabled"):
            raise _CommandError(E_BREAKPOINT_STATE, f"breakpoint state {state} is invalid")
        bp.state = state
    if "h" in options:
        bp.hit_value = _int_option(options, "h", 0)
    condition = options.get("o")
    if condition is not None:
        if condition not in (">=", "==", "%"):
            raise _CommandError(E_OPTIONS, f"hit condition {condition} is invalid")
        bp.hit_condition = condition


def _breakpoint(s: Session, options: Dict[str, str]) -> _Breakpoint:
    bp_id = _required(options, "d", "breakpoint id")
    bp = s.breakpoints.get(bp_id)
    if bp is None:
        raise _CommandError(E_BREAKPOINT_MISSING, f"no breakpoint {bp_id}")
    return bp


def _breakpoint_get(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    return _response(name, txid) + _breakpoint(s, options).xml() + "</response>"


def _breakpoint_update(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    bp = _breakpoint(s, options)
    if "n" in options and bp.path is not None:
        lineno = _int_option(options, "n", 0)
        _check_line(bp.path, lineno)
        bp.lineno = lineno
    _update_breakpoint(bp, options)
    s._index()
    return _response(name, txid) + "</response>"


def _breakpoint_remove(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    bp = _breakpoint(s, options)
    s._remove(bp.id)
    return _response(name, txid) + bp.xml() + "</response>"


def _breakpoint_list(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    return (
        _response(name, txid)
        + "".join(bp.xml() for bp in list(s.breakpoints.values()))
        + "</response>"
    )


def _stack_depth(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    if s._frame is None:
        raise _CommandError(E_STATE, f"no stack in state {s.state}")
    return _response(name, txid, depth=len(s._frames())) + "</response>"


def _stack_get(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    if s._frame is None:
        raise _CommandError(E_STATE, f"no stack in state {s.state}")
    frames = list(enumerate(s._frames()))
    if "d" in options:
        depth = _int_option(options, "d", 0)
        if not 0 <= depth < len(frames):
            raise _CommandError(E_DEPTH, f"stack depth {depth} is invalid (depth {len(frames)})")
        frames = [frames[depth]]
    return (
        _response(name, txid)
        + "".join(
            "<stack"
            + _attrs(
                level=level,
                type="file",
                filename=file_uri(frame.f_code.co_filename),
                lineno=frame.f_lineno,
                where=getattr(frame.f_code, "co_qualname", frame.f_code.co_name),
            )
            + "/>"
            for level, frame in frames
        )
        + "</response>"
    )


def _context_names(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    return (
        _response(name, txid)
        + "".join(f"<context{_attrs(name=n, id=i)}/>" for i, n in enumerate(_CONTEXTS))
        + "</response>"
    )


def _context_get(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    frame, context = s._scope(options)
    if context == 0 and frame.f_code.co_name != "<module>":
        variables = dict(frame.f_locals)
    else:
        variables = {
            k: v
            for k, v in frame.f_globals.items()
            if s.show_hidden or not (k.startswith("__") and k.endswith("__"))
        }
    return (
        _response(name, txid, context=context)
        + "".join(s._property(str(k), str(k), v, s.max_depth) for k, v in variables.items())
        + "</response>"
    )


def _property_value_of(s: Session, options: Dict[str, str]) -> Tuple[str, object]:
    frame, context = s._scope(options)
    fullname = _required(options, "n", "name")
    try:
        return fullname, s._evaluate(frame, context, fullname)
    except BaseException as e:
        raise _CommandError(E_PROPERTY, f"cannot get {fullname}: {type(e).__name__}: {e}") from None


def _property_get(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    fullname, value = _property_value_of(s, options)
    page = _int_option(options, "p", 0)
    max_data = _int_option(options, "m", s.max_data)
    return (
        _response(name, txid)
        + s._property(_short_name(fullname), fullname, value, max(s.max_depth, 1), page, max_data)
        + "</response>"
    )


def _short_name(fullname: str) -> str:
    """The last part of a full name: ``b`` of ``a.b``, ``'k'`` of ``a['k']``."""
    if fullname.endswith("]") and "[" in fullname:
        return fullname[fullname.rindex("[") + 1 : -1]
    if "." in fullname:
        return fullname.rsplit(".", 1)[1]
    return fullname


def _property_value(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    _, value = _property_value_of(s, options)
    text = _value_text(value).encode("utf-8", "replace")
    size = len(text)
    limit = _int_option(options, "m", 0)
    if limit > 0:
        text = text[:limit]
    return (
        _response(name, txid, size=size, encoding="base64")
        + base64.b64encode(text).decode("ascii")
        + "</response>"
    )


def _property_set(
    s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]
) -> str:
    frame, context = s._scope(options)
    fullname = _required(options, "n", "name")
    text = _b64decode(data or "")
    if options.get("t") in ("str", "string"):
        value: object = text
    else:
        try:
            value = s._evaluate(frame, context, text)
        except BaseException as e:
            raise _CommandError(
                E_EVAL, f"cannot evaluate {text!r}: {type(e).__name__}: {e}"
            ) from None
    try:
        _assign(frame, context, fullname, value)
        success = 1
    except BaseException as e:
        log.info("samprof.debug: property_set %s failed: %s", fullname, e)
        success = 0
    return _response(name, txid, success=success) + "</response>"


def _assign(frame: types.FrameType, context: int, fullname: str, value: object) -> None:
    """``fullname = value`` in the frame: a local or global variable, an
    attribute, an item."""
    if fullname.isidentifier() and not keyword.iskeyword(fullname):
        code = frame.f_code
        local_names = code.co_varnames + code.co_cellvars + code.co_freevars
        if context == 1 or (code.co_name != "<module>" and fullname not in local_names):
            frame.f_globals[fullname] = value
            return
        if frame.f_locals is frame.f_globals:
            frame.f_globals[fullname] = value
            return
        _set_local(frame, fullname, value)
        return
    namespace = dict(frame.f_locals) if context == 0 else {}
    namespace["__samprof_value__"] = value
    exec(
        compile(f"{fullname} = __samprof_value__", "<property_set>", "exec"),
        frame.f_globals,
        namespace,
    )


def _set_local(frame: types.FrameType, name: str, value: object) -> None:
    frame.f_locals[name] = value
    _sync_locals(frame)


def _sync_locals(frame: types.FrameType) -> None:
    """Before 3.13 a function frame's f_locals is a copy: write what was
    changed in it back to the frame's variables (3.13's is the frame's
    own, PEP 667)."""
    if sys.version_info >= (3, 13) or frame.f_code.co_name == "<module>":
        return
    import ctypes

    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


def _eval(s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]) -> str:
    frame = s._frame_at(options)
    expression = _b64decode(data or "")
    try:
        code = compile(expression, "<eval>", "eval")
    except (SyntaxError, ValueError):
        code = None
    try:
        if code is None:
            namespace = frame.f_locals
            exec(compile(expression, "<eval>", "exec"), frame.f_globals, namespace)
            _sync_locals(frame)
            return _response(name, txid, success=1) + "</response>"
        value = eval(code, frame.f_globals, frame.f_locals)
    except BaseException as e:
        raise _CommandError(E_EVAL, f"{type(e).__name__}: {e}") from None
    label = expression if "\n" not in expression and len(expression) <= 200 else ""
    page = _int_option(options, "p", 0)
    return (
        _response(name, txid, success=1)
        + s._property(label, label, value, s.max_depth, page)
        + "</response>"
    )


def _source(s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]) -> str:
    if "f" in options:
        path = uri_path(options["f"])
    elif s._frame is not None:
        path = s._frame.f_code.co_filename
    else:
        raise _CommandError(E_FILE, "no current file; give -f")
    lines = linecache.getlines(path)
    if not lines:
        raise _CommandError(E_FILE, f"cannot open {path}")
    begin = max(_int_option(options, "b", 1), 1)
    end = _int_option(options, "e", len(lines))
    text = "".join(lines[begin - 1 : end])
    return _response(name, txid, success=1, encoding="base64") + _b64(text) + "</response>"


def _stream(s: Session, name: str, txid: str, options: Dict[str, str], data: Optional[str]) -> str:
    mode = _int_option(options, "c", -1)
    if mode not in (0, 1, 2):
        raise _CommandError(E_OPTIONS, "-c must be 0 (off), 1 (copy) or 2 (redirect)")
    if mode and not _StreamTee.install(name):
        raise _CommandError(E_REDIRECT, f"cannot redirect {name}")
    s.streams[name] = mode
    return _response(name, txid, success=1) + "</response>"


# Commands that need no frame: also answered while the program runs.
_ANYTIME: Dict[str, Callable[..., str]] = {
    "status": _status,
    "feature_get": _feature_get,
    "feature_set": _feature_set,
    "typemap_get": _typemap_get,
    "breakpoint_set": _breakpoint_set,
    "breakpoint_get": _breakpoint_get,
    "breakpoint_update": _breakpoint_update,
    "breakpoint_remove": _breakpoint_remove,
    "breakpoint_list": _breakpoint_list,
    "context_names": _context_names,
    "stdout": _stream,
    "stderr": _stream,
}
# Commands run by the stopped thread itself.
_STOPPED: Dict[str, Callable[..., str]] = {
    "stack_depth": _stack_depth,
    "stack_get": _stack_get,
    "context_get": _context_get,
    "property_get": _property_get,
    "property_value": _property_value,
    "property_set": _property_set,
    "eval": _eval,
    "source": _source,
}
_COMMAND_NAMES = frozenset([*_ANYTIME, *_STOPPED, *_CONTINUATIONS, "stop", "detach", "break"])


class _StreamTee:
    """sys.stdout or sys.stderr, copied or redirected to the IDE for the
    threads whose session asked for it; every other thread writes through
    unchanged. Installed at the first stdout/stderr command and left in
    place (removing it could undo a later replacement by the program)."""

    _lock = threading.Lock()

    def __init__(self, kind: str, target: Any) -> None:
        self._kind = kind
        self._target = target

    @classmethod
    def install(cls, kind: str) -> bool:
        with cls._lock:
            current = getattr(sys, kind)
            if isinstance(current, _StreamTee):
                return True
            if current is None:
                return False
            setattr(sys, kind, cls(kind, current))
            return True

    def write(self, text: str) -> int:
        session = _sessions.get(threading.get_ident())
        mode = session.streams[self._kind] if session is not None and session._active else 0
        if mode:
            session.send_stream(self._kind, text)  # type: ignore[union-attr]
        if mode != 2:
            return self._target.write(text)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


# --- entry points ----------------------------------------------------------------


def connect(
    host: Optional[str] = None,
    port: Optional[int] = None,
    idekey: Optional[str] = None,
    timeout: float = CONNECT_TIMEOUT,
) -> bool:
    """Break into the IDE at the caller's next line.

    Connects to the IDE listening at ``host``:``port`` (default
    ``SAMPROF_DEBUG_HOST``/``SAMPROF_DEBUG_PORT``, else 127.0.0.1:9003),
    lets it set its breakpoints, then stops at the line after this call
    whatever continuation command it sends. The session then lasts until
    the IDE detaches or stops (stop ends the thread with :class:`Stopped`),
    or the thread's outermost frame returns. Called again in a thread that
    already has a session, it just stops there. Returns False (with a
    warning logged) when no IDE answers, so the program goes on."""
    caller = sys._getframe(1)
    session = _sessions.get(threading.get_ident())
    if session is not None and session._active:
        session._break_requested = True
        session._arm(caller)
        return True
    host, port = _address(host, port)
    try:
        session = Session.open(host, port, idekey, file_uri(caller.f_code.co_filename), timeout)
    except OSError as e:
        log.warning(
            "samprof.debug: no IDE at %s:%s (%s); going on without the debugger", host, port, e
        )
        return False
    if not session._start():
        return True
    session._mode = "run"
    session._break_requested = True
    session._arm(caller)
    sys.settrace(session._trace_call)
    return True


def _address(host: Optional[str], port: Optional[int]) -> Tuple[str, int]:
    if host is None:
        host = os.environ.get("SAMPROF_DEBUG_HOST") or DEFAULT_HOST
    if port is None:
        text = os.environ.get("SAMPROF_DEBUG_PORT")
        try:
            port = int(text) if text else DEFAULT_PORT
        except ValueError:
            raise ValueError(f"SAMPROF_DEBUG_PORT={text!r} is not a port number") from None
    return host, port


# Environment variables that commonly name the deployment; the middleware
# will not turn itself on where one of them says production.
PRODUCTION_VARIABLES = (
    "SAMPROF_ENV",
    "ENVIRONMENT",
    "ENV",
    "APP_ENV",
    "PYTHON_ENV",
    "FLASK_ENV",
    "DJANGO_ENV",
    "NODE_ENV",
    "RAILS_ENV",
)
_PRODUCTION_VALUES = ("production", "prod")
_TRUE = ("1", "true", "yes", "on")


class Gate:
    """What the debugging middleware decides before a request: is it on,
    does this request ask for a session, and the connection to the IDE.

    ``enabled`` defaults to the ``SAMPROF_DEBUG`` variable (1/true/yes/on);
    off otherwise. Enabled where any of :data:`PRODUCTION_VARIABLES` is
    ``production`` or ``prod``, it stays off with a warning, unless
    ``force`` (or ``SAMPROF_DEBUG_FORCE=1``). A request asks with the
    query parameter ``param`` (``XDEBUG_SESSION_START=<idekey>``) or the
    cookie ``cookie`` (``XDEBUG_SESSION=<idekey>``); with ``idekey`` set,
    only requests naming that key are debugged.
    """

    def __init__(
        self,
        enabled: Optional[bool] = None,
        host: Optional[str] = None,
        port: Optional[int] = None,
        idekey: Optional[str] = None,
        param: str = "XDEBUG_SESSION_START",
        cookie: str = "XDEBUG_SESSION",
        connect_timeout: float = CONNECT_TIMEOUT,
        force: bool = False,
    ) -> None:
        if enabled is None:
            enabled = os.environ.get("SAMPROF_DEBUG", "").lower() in _TRUE
        self.host, self.port = _address(host, port)
        self.idekey = idekey
        self.param = param
        self.cookie = cookie
        self.connect_timeout = connect_timeout
        force = force or os.environ.get("SAMPROF_DEBUG_FORCE", "").lower() in _TRUE
        production = [
            name
            for name in PRODUCTION_VARIABLES
            if os.environ.get(name, "").strip().lower() in _PRODUCTION_VALUES
        ]
        if enabled and production and not force:
            log.warning(
                "samprof.debug: the debugging middleware stays off: %s says production "
                "(force=True or SAMPROF_DEBUG_FORCE=1 overrides)",
                "=".join([production[0], os.environ[production[0]]]),
            )
            enabled = False
        self.enabled = bool(enabled)
        if self.enabled:
            log.warning(
                "samprof.debug: requests with %s or the %s cookie run under a debugger "
                "that connects to an IDE at %s:%s; a development tool, never for production",
                param,
                cookie,
                self.host,
                self.port,
            )

    def idekey_of(self, query: str, cookies: str) -> Optional[str]:
        """The IDE key a request asks a session for, or None."""
        if not self.enabled:
            return None
        key = None
        if self.param in query:
            values = urllib.parse.parse_qs(query, keep_blank_values=True).get(self.param)
            if values:
                key = values[0]
        if key is None and self.cookie in cookies:
            for part in cookies.split(";"):
                name, _, value = part.strip().partition("=")
                if name == self.cookie:
                    key = urllib.parse.unquote(value)
                    break
        if key is None or (self.idekey is not None and key != self.idekey):
            return None
        return key

    def open(self, idekey: str, fileuri: str) -> Optional[Session]:
        """A session for this thread, or None (logged) when no IDE answers."""
        try:
            return Session.open(self.host, self.port, idekey, fileuri, self.connect_timeout)
        except OSError as e:
            log.warning(
                "samprof.debug: a request asked for a debugging session but no IDE answers "
                "at %s:%s (%s); it runs without one",
                self.host,
                self.port,
                e,
            )
            return None


def app_uri(app: object) -> str:
    """The file URI the ``init`` packet names for an application: the file
    of its code, else the program's."""
    for candidate in (app, type(app).__call__):
        code = getattr(getattr(candidate, "__func__", candidate), "__code__", None)
        if code is not None and not _hidden(code.co_filename):
            return file_uri(os.path.abspath(code.co_filename))
    return file_uri(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
