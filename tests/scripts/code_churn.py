"""Creates and drops code objects as fast as it can while samprof samples.

Usage: code_churn.py MODE HZ SECONDS THREADS PROFILE_OUT

THREADS threads each loop over four ways of making code that dies right away:
exec of a generated ``def``, a generated function returning a lambda,
compile + eval of a generated expression, and importlib.reload of a
generated module. Every generated function has a unique name (or, for the
eval'd expression, a unique file name) ``gen_<kind>_<thread>_<n>``, and runs
inside ``samprof.labels(gen=<that name>)``, so the test can check that a
sample names a generated function only while that very function ran.

Writes the profile to PROFILE_OUT and prints one JSON line: the names it
generated and ran, the (file, name) of every code object alive at the end
(what the rest of the profile may name), and the stats.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import tempfile
import threading
import time
import types

import samprof

# Iterations of each generated function's loop: long enough for samples to
# land inside it, short enough that code objects die thousands of times a
# second.
LOOP = 150


def run_generated_def(tag: str, n: int) -> str:
    name = f"gen_d_{tag}_{n}"
    src = f"def {name}(k):\n    s = 0\n    for i in range(k):\n        s += i * {n}\n    return s\n"
    ns: dict = {}
    with samprof.labels(gen=name):
        exec(compile(src, f"<{name}>", "exec"), ns)
        ns[name](LOOP)
    return name


def run_generated_lambda(tag: str, n: int) -> str:
    name = f"gen_l_{tag}_{n}"
    src = f"def {name}():\n    return lambda k: sum([i * {n} for i in range(k)])\n"
    ns: dict = {}
    with samprof.labels(gen=name):
        exec(compile(src, f"<{name}>", "exec"), ns)
        ns[name]()(LOOP)
    return name


def run_generated_eval(tag: str, n: int) -> str:
    # The code object is named "<module>"; its file name carries the tag.
    name = f"gen_e_{tag}_{n}"
    with samprof.labels(gen=name):
        code = compile(f"sum([i * {n} for i in range(K)])", f"<{name}>", "eval")
        eval(code, {"K": LOOP})
    return name


class Reloader:
    """A generated module rewritten and reloaded each time."""

    def __init__(self, tag: str, directory: str) -> None:
        self.tag = tag
        self.modname = f"churn_mod_{tag}"
        self.path = os.path.join(directory, self.modname + ".py")
        self.module = None

    def run(self, n: int) -> str:
        name = f"gen_m_{self.tag}_{n}"
        with open(self.path, "w") as f:
            f.write(
                f"def {name}(k):\n"
                f"    s = 0\n"
                f"    for i in range(k):\n"
                f"        s += i ^ {n}\n"
                f"    return s\n"
                f"FN = {name}\n"
            )
        if self.module is None:
            self.module = importlib.import_module(self.modname)
        else:
            self.module = importlib.reload(self.module)
        with samprof.labels(gen=name):
            self.module.FN(LOOP)
        return name


def churn(tag: str, directory: str, deadline: float, ran: set, counts: list) -> None:
    reloader = Reloader(tag, directory)
    n = 0
    while time.monotonic() < deadline:
        n += 1
        # A reload writes a file and runs the import machinery: ten times
        # the cost of the others, so it comes less often.
        kind = n % 10
        if kind == 9:
            name = reloader.run(n)
        elif kind % 3 == 0:
            name = run_generated_def(tag, n)
        elif kind % 3 == 1:
            name = run_generated_lambda(tag, n)
        else:
            name = run_generated_eval(tag, n)
        ran.add(name)
    counts.append(n)


def code_names(code: types.CodeType, out: set) -> None:
    out.add((code.co_filename, code.co_name))
    out.add((code.co_filename, getattr(code, "co_qualname", code.co_name)))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            code_names(c, out)


def alive_code_names() -> set:
    """(file, name) of every code object reachable from a live function."""
    out: set = set()
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType):
            code_names(obj.__code__, out)
    return out


def main() -> None:
    mode, hz, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    threads, out = int(sys.argv[4]), sys.argv[5]
    # No .pyc: a reloaded module must be compiled from its new source.
    sys.dont_write_bytecode = True
    directory = tempfile.mkdtemp(prefix="samprof-churn-")
    sys.path.insert(0, directory)
    cls = samprof.CPUProfiler if mode == "cpu" else samprof.WallProfiler
    ran: set = set()
    counts: list = []
    # samprof.labels is imported on first use: import it now, not inside
    # the profile, where a sample may land in its module's class body,
    # whose code object then dies and is rightly named in the profile, but
    # is one the checks below cannot tell from a misnamed frame.
    samprof.labels  # noqa: B018
    prof = cls(hz=hz)
    prof.start()
    deadline = time.monotonic() + seconds
    helpers = [
        threading.Thread(target=churn, args=(str(i), directory, deadline, ran, counts))
        for i in range(1, threads)
    ]
    for t in helpers:
        t.start()
    churn("0", directory, deadline, ran, counts)
    for t in helpers:
        t.join()
    data = prof.stop()
    with open(out, "wb") as f:
        f.write(data)
    stats = prof.stats
    assert stats is not None
    print(
        json.dumps(
            {
                "ran": sorted(ran),
                "iterations": sum(counts),
                "alive": sorted(alive_code_names()),
                "samples": stats.samples,
                "dropped": stats.dropped,
                "engine": stats.engine,
                "effective_hz": stats.effective_hz,
            }
        )
    )


if __name__ == "__main__":
    main()
