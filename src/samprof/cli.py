"""The ``samprof`` command line.

::

    samprof record [--mode cpu|wall|heap] [--hz N | --rate BYTES [--numpy]]
                   [-o FILE] [--] script.py [args ...]
    samprof record [options] -m module [args ...]
    samprof top FILE|DIR ... [-n N] [-i TYPE] [--cum] [--lines] [--tag KEY=VALUE]
                [--focus REGEX] [--callers FUNC | --callees FUNC] [--diff-base FILE|DIR]
    samprof collapsed FILE|DIR ... [-i TYPE] [--lines] [--tag ...] [--focus ...] [-o OUT]
    samprof speedscope FILE|DIR ... [--by thread|LABEL] [-i TYPE] [-o OUT.json]
    samprof diff BASE NEW [-n N] [-i TYPE] [--normalize] [--lines]
    samprof merge FILE|DIR ... -o OUT
    samprof serve [--listen HOST:PORT] [--token-file FILE] [--no-heap]
                  [--push URL] [--] script.py [args ...]
    samprof serve [options] -m module [args ...]
    samprof serve --list

``record`` runs a program the way ``python`` would run it (same ``sys.argv``,
``__main__``, ``sys.path[0]``, exit status, stdin and stdout) while profiling
it, and writes the profile when the program ends. Everything after the script
or module name belongs to the program. samprof itself writes only to stderr.

``serve`` runs a program the same way with Go's /debug/pprof endpoints on
(samprof.http): ``go tool pprof http://127.0.0.1:6060/debug/pprof/profile``
profiles it while it runs. Each process forked from it serves on a free
port of its own; every one prints its address to stderr and writes a
discovery file, which ``serve --list`` reads. With ``--push URL`` (or the
``SAMPROF_PUSH_*`` variables) each process also sends its profiles to a
Pyroscope server continuously (samprof.continuous).

``top`` prints the functions that used the most, like ``go tool pprof -top``:
of one profile, of several merged (files, or every file of a directory), of
the samples with a label (``--tag``) or through a function (``--focus``), or
of the difference from a base; ``--callers FUNC`` and ``--callees FUNC``
show who calls a function and what it calls instead. cProfile files
(pstats, as the middleware's cProfile backend writes them) are read too,
with their exact call counts. ``collapsed`` prints folded stacks
(flamegraph.pl), ``speedscope`` writes speedscope's JSON, ``diff`` lists
what grew and shrank, ``merge`` writes several profiles as one. These need
only the profiles, not samprof's compiled core (samprof._viewcli).
"""

from __future__ import annotations

import argparse
import builtins
import importlib.machinery
import importlib.util
import io
import os
import runpy
import signal
import sys
import types
import zipfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["main"]

_PROG = "samprof"
_ENGINES = ("auto", "perf", "timer", "itimer")
# The profiler class of each --mode, by its name in the samprof package. A
# mode is offered when the package has its class.
_MODE_CLASSES = {"cpu": "CPUProfiler", "wall": "WallProfiler", "heap": "HeapProfiler"}

# Options of `record` and `serve` that take a value. Their command lines are
# split at the first argument that is none of these (or at "--"), so that
# everything from the script name on reaches the program untouched.
_RUN_VALUE_OPTIONS = {
    "record": ("--hz", "--rate", "--mode", "--engine", "--signal", "-o", "--output", "-m"),
    "serve": ("--listen", "--token-file", "--max-seconds", "--push", "-m"),
    "debug": ("--host", "--port", "--idekey", "-m"),
}
# Where `samprof serve` listens by default: Go's customary pprof port.
_DEFAULT_LISTEN = "127.0.0.1:6060"

# Frames of these files sit below the program's own frames; they are cut from
# the traceback of an exception the program does not handle, as python shows
# only the program's frames. These are code file names, not module paths:
# runpy is a frozen module ("<frozen runpy>") on 3.11+.
_RUNNER_FILES = frozenset([__file__, runpy.run_path.__code__.co_filename])


def _profiler_classes() -> Dict[str, Callable[..., Any]]:
    """The profiler class of each --mode this samprof has."""
    import samprof

    return {
        mode: getattr(samprof, name)
        for mode, name in _MODE_CLASSES.items()
        if hasattr(samprof, name)
    }


def _signal_number(text: str) -> int:
    """A signal by number or name: 27, SIGPROF, PROF, SIGRTMIN+3."""
    name = text.upper()
    if not name.startswith("SIG") and not name.isdigit():
        name = "SIG" + name
    try:
        if name.isdigit():
            return int(name)
        base, _, offset = name.partition("+")
        value = int(getattr(signal, base))
        return value + int(offset) if offset else value
    except (AttributeError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown signal: {text!r}") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _build_parser() -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    """The samprof parser and its subparsers by command."""
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="A sampling profiler for Python that writes pprof.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    record = commands.add_parser(
        "record",
        help="run a Python program under the profiler",
        usage=(
            f"{_PROG} record [options] [--] script.py [args ...]\n"
            f"       {_PROG} record [options] -m module [args ...]"
        ),
        description=(
            "Run a Python script or module as python would, profiling it, and write "
            "the profile (gzipped pprof) when it ends. Arguments after the script "
            "or module name are passed to it."
        ),
        allow_abbrev=False,
    )
    record.add_argument(
        "--mode",
        default="cpu",
        help="what to profile: cpu, wall (wall-clock time) or heap (memory); default cpu",
    )
    record.add_argument(
        "--hz",
        type=_positive_int,
        help="cpu and wall: samples per second of CPU time (wall time with --mode wall); "
        "default 100",
    )
    record.add_argument(
        "--rate",
        type=_positive_int,
        metavar="BYTES",
        help="heap: mean bytes allocated between samples (Go's MemProfileRate); "
        "default 524288 (512 KiB); 1 records every allocation",
    )
    record.add_argument(
        "--numpy",
        action="store_true",
        help="heap: count numpy's array data too (numpy 1.22 or newer), which "
        "numpy allocates outside Python's allocators",
    )
    record.add_argument(
        "--engine",
        choices=_ENGINES,
        help="cpu and wall: timer engine (default auto: perf events, else timers)",
    )
    record.add_argument(
        "--signal",
        type=_signal_number,
        default=signal.SIGPROF,
        help="cpu and wall: signal the CPU timers deliver (default SIGPROF; e.g. "
        "SIGRTMIN+3 when the program owns SIGPROF)",
    )
    record.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the profile (default samprof.<name>.<mode>.pb.gz)",
    )
    record.add_argument("-m", dest="module", metavar="module", help="run a library module")

    from samprof import _viewcli

    _viewcli.add_parsers(commands, _positive_int)

    serve = commands.add_parser(
        "serve",
        help="run a Python program with the /debug/pprof endpoints on",
        usage=(
            f"{_PROG} serve [options] [--] script.py [args ...]\n"
            f"       {_PROG} serve [options] -m module [args ...]\n"
            f"       {_PROG} serve --list"
        ),
        description=(
            "Run a Python script or module as python would, serving Go's /debug/pprof "
            "endpoints from it (go tool pprof URL/profile?seconds=30, heap, goroutine, ...). "
            "The address goes to stderr. Each process forked from it (a pre-fork server's "
            "workers) serves on a free port of its own and prints its address too; "
            "every one also writes a discovery file, which --list reads."
        ),
        allow_abbrev=False,
    )
    serve.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=_DEFAULT_LISTEN,
        help=f"where to listen (default {_DEFAULT_LISTEN}; port 0 picks a free one; "
        "an address other than loopback needs --token-file)",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="require the token in FILE on every request (Authorization: Bearer TOKEN "
        "or ?token=TOKEN)",
    )
    serve.add_argument(
        "--no-heap",
        dest="heap",
        action="store_false",
        help="do not start a heap profile (heap and allocs then answer 404)",
    )
    serve.add_argument(
        "--max-seconds",
        type=_positive_int,
        default=300,
        help="the longest capture a request may ask for (default 300)",
    )
    serve.add_argument(
        "--push",
        metavar="URL",
        help="also send the profiles continuously to a Pyroscope server (or Grafana "
        "Alloy) at URL, every process forked from the program too; the other settings "
        "come from the SAMPROF_PUSH_* environment variables (see samprof.continuous.start)",
    )
    serve.add_argument(
        "--list",
        action="store_true",
        help="list the processes that serve now (from their discovery files) and exit",
    )
    serve.add_argument("-m", dest="module", metavar="module", help="run a library module")

    debug = commands.add_parser(
        "debug",
        help="run a Python program under a DBGP debugger (Komodo, Vdebug, VS Code)",
        usage=(
            f"{_PROG} debug [options] [--] script.py [args ...]\n"
            f"       {_PROG} debug [options] -m module [args ...]"
        ),
        description=(
            "Run a Python script or module as python would, under a DBGP debugger engine "
            "that connects to the IDE listening at --host:--port and waits there, before "
            "the program's first line, for the IDE's commands (step_into stops at that "
            "line, run goes to the first breakpoint)."
        ),
        allow_abbrev=False,
    )
    debug.add_argument("--host", help="where the IDE listens (default 127.0.0.1)")
    debug.add_argument("--port", type=_positive_int, help="the IDE's port (default 9003)")
    debug.add_argument(
        "--idekey", help="the IDE key sent to the IDE (default $DBGP_IDEKEY, else none)"
    )
    debug.add_argument("-m", dest="module", metavar="module", help="run a library module")
    return parser, {"record": record, "serve": serve, "debug": debug}


def _split_run_args(command: str, args: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Split the arguments of ``record`` or ``serve`` into samprof's options
    and the target's command line (script and its arguments, or the
    module's arguments)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return list(args[:i]), list(args[i + 1 :])
        if arg == "-m":
            return list(args[: i + 2]), list(args[i + 2 :])
        if arg.startswith("-m") and not arg.startswith("--"):
            return list(args[: i + 1]), list(args[i + 1 :])
        if not arg.startswith("-") or arg == "-":
            return list(args[:i]), list(args[i:])
        if arg in _RUN_VALUE_OPTIONS[command]:
            i += 1
        i += 1
    return list(args), []


def _error(message: str) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return 1


def _default_output(script: Optional[str], module: Optional[str], mode: str) -> str:
    if module is not None:
        name = module
    else:
        assert script is not None
        name = os.path.splitext(os.path.basename(os.path.normpath(script)))[0] or "profile"
    return f"samprof.{name}.{mode}.pb.gz"


def _strip_runner_frames(tb: Optional[types.TracebackType]) -> Optional[types.TracebackType]:
    while tb is not None and tb.tb_frame.f_code.co_filename in _RUNNER_FILES:
        tb = tb.tb_next
    return tb


def _exit_status(code: object) -> int:
    """The exit status python gives ``raise SystemExit(code)``: None is 0, an
    int is itself, anything else is printed to stderr and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _is_zipfile(path: str) -> bool:
    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False


def _is_main_container(script: str) -> bool:
    """True for a directory or zip file that python runs by its __main__.py."""
    return os.path.isdir(script) or (os.path.isfile(script) and _is_zipfile(script))


def _main_container_spec(script: str) -> Optional[importlib.machinery.ModuleSpec]:
    """The spec of the __main__ module inside a directory or zip file."""
    return importlib.machinery.PathFinder.find_spec("__main__", [os.path.abspath(script)])


def _set_sys_path(script: Optional[str], module: Optional[str]) -> None:
    """Make sys.path[0] what python makes it for the target (in place of
    samprof's own entry)."""
    if module is not None:
        sys.path[0] = os.getcwd()
    elif script is not None and _is_main_container(script):
        sys.path[0] = os.path.abspath(script)
    elif script is not None:
        sys.path[0] = os.path.dirname(os.path.realpath(script))


def _check_target(script: Optional[str], module: Optional[str]) -> Optional[Tuple[str, int]]:
    """An (error message, exit status) if the target cannot be run, as
    python reports it; None if it can. Call after _set_sys_path."""
    if module is not None:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        return None if found else (f"No module named {module}", 1)
    assert script is not None
    if not os.path.exists(script):
        return f"can't open file {script!r}: No such file or directory", 2
    if _is_main_container(script) and _main_container_spec(script) is None:
        return f"can't find '__main__' module in {script!r}", 1
    return None


def _prepare_target(script: Optional[str], module: Optional[str]) -> Optional[int]:
    """Set sys.path[0] for the target and check that it can run; the exit
    status python would give (after saying why) if it cannot, else None."""
    _set_sys_path(script, module)
    problem = _check_target(script, module)
    if problem is None:
        return None
    message, status = problem
    _error(message)
    return status


def _exec_as_main(code: types.CodeType, **attributes: Any) -> None:
    """Execute ``code`` in a fresh ``__main__`` module with these attributes.

    Like python's own __main__, the module stays in sys.modules after the
    code returns, for atexit handlers and threads that still use it.
    """
    module = types.ModuleType("__main__")
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    for name, value in attributes.items():
        setattr(module, name, value)
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def _run_script(script: str) -> None:
    """Run a script, a directory or a zip file as python runs it.

    Not runpy.run_path: that sets sys.argv[0] to the path it is given and
    gives __main__ that path as __file__, while python (3.9+) keeps
    sys.argv[0] as typed and makes __file__ (and the code's file name, which
    tracebacks show) absolute.
    """
    if _is_main_container(script):
        spec = _main_container_spec(script)
        assert spec is not None and spec.loader is not None  # checked by _check_target
        code = spec.loader.get_code("__main__")  # type: ignore[attr-defined]
        _exec_as_main(
            code,
            __file__=spec.origin,
            __cached__=spec.cached,
            __loader__=spec.loader,
            __spec__=spec,
            __package__="",
        )
        return
    filename = os.path.abspath(script)
    loader: Any
    if filename.endswith(".pyc"):
        loader = importlib.machinery.SourcelessFileLoader("__main__", filename)
        code = loader.get_code("__main__")
    else:
        loader = importlib.machinery.SourceFileLoader("__main__", filename)
        with io.open_code(filename) as f:
            source = f.read()
        code = compile(source, filename, "exec", dont_inherit=True)
    _exec_as_main(code, __file__=filename, __cached__=None, __loader__=loader)


def _run_as_main(
    script: Optional[str],
    module: Optional[str],
    argv: List[str],
    passes: Tuple[type, ...] = (),
) -> int:
    """Run the script or module as ``__main__`` with ``argv`` as its
    arguments and return the exit status python would give it.

    An exception the program does not handle goes to sys.excepthook (which
    prints it) with samprof's and runpy's frames cut off; those of the
    classes ``passes`` go to the caller.
    """
    try:
        if module is not None:
            # runpy replaces sys.argv[0] with the module's file, as python -m.
            sys.argv = ["-m", *argv]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            assert script is not None
            sys.argv = [script, *argv]
            _run_script(script)
    except SystemExit as e:
        return _exit_status(e.code)
    except passes:
        raise
    except BaseException as e:
        # The default hook prints e.__traceback__ whatever it is passed.
        tb = _strip_runner_frames(e.__traceback__)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        # python dies of the SIGINT itself; 130 is what a shell shows then.
        return 130 if isinstance(e, KeyboardInterrupt) else 1
    return 0


def _target(
    parser: argparse.ArgumentParser, opts: argparse.Namespace, rest: List[str]
) -> Tuple[Optional[str], Optional[str], List[str]]:
    """(script, module, the program's arguments) of ``record``, ``serve``
    or ``debug``. ``-m module`` after ``--`` (``samprof record -o f -- -m
    module``, as py-spy takes it) is a module too, as is python's
    ``-mmodule``."""
    if opts.module is not None:
        return None, opts.module, rest
    if rest and rest[0] == "-m":
        if len(rest) < 2:
            parser.error("argument -m: expected one argument")
        return None, rest[1], rest[2:]
    if rest and rest[0].startswith("-m"):
        return None, rest[0][2:], rest[1:]
    if rest:
        return rest[0], None, rest[1:]
    parser.error("a script or -m module is required")


def _hide_runner_frames() -> None:
    """The runner's frames sit at the root of every stack of the program;
    they are samprof's, not the program's."""
    from samprof._profiler import _hide_file

    for name in _RUNNER_FILES:
        _hide_file(name)


def _record(parser: argparse.ArgumentParser, opts: argparse.Namespace, rest: List[str]) -> int:
    script, module, target_argv = _target(parser, opts, rest)
    try:
        classes = _profiler_classes()
    except ImportError as e:
        return _error(str(e))
    if opts.mode not in classes:
        parser.error(
            f"argument --mode: invalid choice: {opts.mode!r} (choose from {', '.join(classes)})"
        )
    try:
        profiler = _make_profiler(parser, classes, opts)
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    _hide_runner_frames()

    output = opts.output or _default_output(script, module, opts.mode)
    # The program may change directory; the profile goes where the user meant.
    output_path = os.path.abspath(output)
    output_dir = os.path.dirname(output_path)
    if not os.path.isdir(output_dir):
        return _error(f"cannot write {output}: directory {output_dir} does not exist")
    status = _prepare_target(script, module)
    if status is not None:
        return status

    import samprof

    try:
        profiler.start()
    except samprof.ProfilerError as e:
        return _error(f"cannot start the profiler: {e}")
    pid = os.getpid()
    finished: List[bool] = []

    def finish(status: int) -> int:
        """Stop the profiler and write the profile (once, and only in this
        process: a child the program forked and ended with sys.exit() comes
        back here too); the exit status, 1 when the profile is lost."""
        if os.getpid() != pid or finished:
            return status
        finished.append(True)
        try:
            data = profiler.stop()
        except samprof.ProfilerError as e:
            _error(f"cannot stop the profiler: {e}")
            return status or 1
        try:
            with open(output_path, "wb") as f:
                f.write(data)
        except OSError as e:
            _error(f"cannot write {output}: {e.strerror or e}")
            return status or 1
        print(f"{_PROG}: wrote {output} ({_summary(profiler.stats)})", file=sys.stderr)
        return status

    # Stopped by SIGTERM (kill, systemd, docker stop) without a handler of
    # the program's: write the profile, then die of the signal as the
    # program would have. A program that handles SIGTERM replaces this and
    # ends through the normal path.
    from samprof._middleware import on_sigterm

    on_sigterm(lambda: finish(0))
    status = 1
    try:
        status = _run_as_main(script, module, target_argv)
    finally:
        # A SIGTERM now waits until the profile is written, then ends the
        # process as it would have.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            status = finish(status)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return status


def _parse_listen(parser: argparse.ArgumentParser, text: str) -> Tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT, :PORT (every interface, as in Go) or PORT
    (loopback) as (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text
    elif host == "":
        host = "0.0.0.0"
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535 or not host:
        parser.error(f"argument --listen: expected HOST:PORT, got {text!r}")
    return host, port


def _read_token(path: str) -> str:
    """The token in a file (surrounding white space dropped); OSError or
    ValueError says what is wrong with it."""
    with open(path) as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"{path} is empty")
    if os.stat(path).st_mode & 0o077:
        print(
            f"{_PROG}: warning: {path} can be read by other users; chmod 600 it",
            file=sys.stderr,
        )
    return token


def _announce(server: Any) -> None:
    # os.write, not print: forked children call this (see samprof.http).
    os.write(2, f"{_PROG}: pid {server.pid} serves {server.url}\n".encode())


def _list_servers() -> int:
    from samprof import http

    found = http.servers()
    if not found:
        print(f"{_PROG}: no process serves now ({http.discovery_dir()})", file=sys.stderr)
        return 0
    print(f"{'PID':>7} {'PPID':>7} {'TOKEN':5} {'URL':40} COMMAND")
    for e in found:
        command = " ".join(str(a) for a in e.get("cmdline") or [])
        token = "yes" if e.get("token") else "no"
        print(f"{e['pid']:>7} {e.get('ppid', '?'):>7} {token:5} {e.get('url', '?'):40} {command}")
    return 0


def _serve(parser: argparse.ArgumentParser, opts: argparse.Namespace, rest: List[str]) -> int:
    if opts.list:
        if rest or opts.module is not None:
            parser.error("--list runs no program")
        return _list_servers()
    script, module, target_argv = _target(parser, opts, rest)
    host, port = _parse_listen(parser, opts.listen)
    from samprof import http

    token = None
    if opts.token_file is not None:
        try:
            token = _read_token(opts.token_file)
        except OSError as e:
            return _error(f"cannot read the token: {opts.token_file}: {e.strerror or e}")
        except ValueError as e:
            return _error(f"cannot read the token: {e}")
    elif not http._is_loopback(host):
        parser.error(
            f"argument --listen: {opts.listen} is not a loopback address: serving there "
            "needs --token-file, or anyone who can reach the port could profile the program"
        )
    status = _prepare_target(script, module)
    if status is not None:
        return status
    try:
        server = http.serve(
            host, port, token=token, heap=opts.heap, max_seconds=opts.max_seconds, per_process=True
        )
    except OSError as e:
        return _error(f"cannot listen on {opts.listen}: {e.strerror or e}")
    http._announce_forks(_announce)
    _announce(server)
    _hide_runner_frames()
    if (
        opts.push is not None
        or os.environ.get("SAMPROF_PUSH_URL")
        or os.environ.get("SAMPROF_PUSH_DIR")
    ):
        status = _start_agent(opts.push)
        if status is not None:
            return status
    # The server stays up until the process exits: after the program's main
    # code, while its other threads still run.
    return _run_as_main(script, module, target_argv)


def _debug(parser: argparse.ArgumentParser, opts: argparse.Namespace, rest: List[str]) -> int:
    script, module, target_argv = _target(parser, opts, rest)
    from samprof import debug

    status = _prepare_target(script, module)
    if status is not None:
        return status
    try:
        host, port = debug._address(opts.host, opts.port)
    except ValueError as e:
        return _error(str(e))
    if script is not None:
        path = os.path.abspath(script)
    else:
        spec = importlib.util.find_spec(module) if module else None
        path = (spec.origin if spec is not None else None) or ""
    try:
        session = debug.Session.open(host, port, opts.idekey, debug.file_uri(path), timeout=5.0)
    except OSError as e:
        return _error(f"no IDE listening at {host}:{port}: {e.strerror or e}")
    # The first step_into stops in the program's module-level code, not in
    # what the runner calls before it.
    session.entry_module = True
    try:
        return session.call(_run_as_main, script, module, target_argv, passes=(debug.Stopped,))
    except debug.Stopped:
        print(f"{_PROG}: the program was stopped from the debugger", file=sys.stderr)
        return 1


def _start_agent(url: Optional[str]) -> Optional[int]:
    """Starts the continuous agent (samprof serve --push, or the
    SAMPROF_PUSH_* variables); an exit status if it cannot start."""
    from samprof import ProfilerError, continuous

    try:
        agent = continuous.start(url)
    except (ValueError, TypeError, OSError, ProfilerError) as e:
        return _error(f"cannot start pushing profiles: {e}")
    where = agent.config.url or agent.config.directory
    print(
        f"samprof: sending {', '.join(agent.config.profiles)} profiles of "
        f"{agent.config.app_name} to {where} every {agent.config.interval:g} s",
        file=sys.stderr,
    )
    return None


def _make_profiler(
    parser: argparse.ArgumentParser,
    classes: Dict[str, Callable[..., Any]],
    opts: argparse.Namespace,
) -> Any:
    """The profiler --mode names, configured by the options that apply to it."""
    if opts.mode == "heap":
        for name, value in (("--hz", opts.hz), ("--engine", opts.engine)):
            if value is not None:
                parser.error(f"argument {name}: applies to --mode cpu and wall, not heap")
        if opts.signal != signal.SIGPROF:
            parser.error("argument --signal: applies to --mode cpu and wall, not heap")
        kwargs = {} if opts.rate is None else {"rate": opts.rate}
        return classes["heap"](numpy=opts.numpy, **kwargs)
    for name, given in (("--rate", opts.rate is not None), ("--numpy", opts.numpy)):
        if given:
            parser.error(f"argument {name}: applies to --mode heap, not {opts.mode}")
    return classes[opts.mode](
        100 if opts.hz is None else opts.hz,
        engine=opts.engine or "auto",
        signal=opts.signal,
    )


def _summary(stats: Any) -> str:
    """One line on what a finished profile holds and what it lost."""
    if hasattr(stats, "sampled"):  # HeapStats
        summary = f"{stats.sampled} sampled allocations at rate {stats.rate}, {stats.live} live"
        if stats.numpy:
            summary += ", numpy's array data included"
        if stats.untracked:
            summary += f", {stats.untracked} untracked (live table full)"
    else:
        summary = f"{stats.samples} samples, engine {stats.engine} at {stats.effective_hz:.0f} Hz"
    dropped = [f"{reason}={n}" for reason, n in stats.dropped.items() if n]
    if dropped:
        summary += ", dropped " + " ".join(dropped)
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the samprof command line with ``argv`` (default ``sys.argv[1:]``)
    and return the exit status. Usage errors exit with status 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser, subparsers = _build_parser()
    rest: List[str] = []
    if args and args[0] in _RUN_VALUE_OPTIONS:
        options, rest = _split_run_args(args[0], args[1:])
        args = [args[0], *options]
    opts = parser.parse_args(args)
    if opts.command == "record":
        return _record(subparsers["record"], opts, rest)
    if opts.command == "serve":
        return _serve(subparsers["serve"], opts, rest)
    if opts.command == "debug":
        return _debug(subparsers["debug"], opts, rest)
    from samprof import _viewcli

    return _viewcli.run(opts)


if __name__ == "__main__":
    sys.exit(main())
