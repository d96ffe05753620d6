"""Runs samprof's profile tools in a process that refuses samprof's compiled
core, as on a machine that has profiles but no build of samprof's C code.

    python pprof_without_core.py DIRECTORY BASE OUTPUT_DIR

An import hook refuses ``samprof._samprof``. The script reads, merges,
writes, diffs and prints ``samprof top``, ``collapsed``, ``speedscope``,
``diff`` and ``merge`` of the profiles in DIRECTORY (BASE is the diff's
base), writes what it printed and made into
OUTPUT_DIR, and prints one JSON object: what it found.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import io
import json
import os
import sys


class RefuseCompiledCore(importlib.abc.MetaPathFinder):
    """Makes ``import samprof._samprof`` fail as it does where the core was
    never built."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name == "samprof._samprof":
            raise ModuleNotFoundError(f"No module named {name!r} (refused by the test)", name=name)
        return None


def _cli(args):  # type: ignore[no-untyped-def]
    """samprof's command line in this process: (status, stdout, stderr)."""
    from samprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    return status, out.getvalue(), err.getvalue()


def main() -> None:
    directory, base_path, output = sys.argv[1:4]
    sys.meta_path.insert(0, RefuseCompiledCore())

    import samprof
    from samprof import pprof

    result = {}
    paths = sorted(os.path.join(directory, name) for name in os.listdir(directory))
    profiles = []
    for path in paths:
        with open(path, "rb") as f:
            profiles.append(pprof.read(f.read()))
    merged = pprof.merge(profiles)
    data = pprof.write(merged)
    result["round_trip_equal"] = pprof.read(data) == merged
    with open(os.path.join(output, "merged.pb.gz"), "wb") as f:
        f.write(data)
    with open(base_path, "rb") as f:
        base = pprof.read(f.read())
    with open(os.path.join(output, "diff.pb.gz"), "wb") as f:
        f.write(pprof.write(pprof.diff(merged, base)))

    result["top_dir"] = _cli(["top", "-n", "1000", directory])
    result["top_files"] = _cli(["top", "-n", "1000", *paths])
    result["top_diff"] = _cli(["top", "-n", "1000", directory, "--diff-base", base_path])
    result["collapsed"] = _cli(["collapsed", directory])
    result["speedscope"] = _cli(
        ["speedscope", directory, "-o", os.path.join(output, "s.speedscope.json")]
    )
    result["diff"] = _cli(["diff", base_path, directory])
    result["merge"] = _cli(["merge", directory, "-o", os.path.join(output, "cli-merged.pb.gz")])
    result["record"] = _cli(["record", "-o", os.path.join(output, "x.pb.gz"), "x.py"])
    try:
        samprof.CPUProfiler(hz=100)
        result["profiler_error"] = None
    except ImportError as e:
        result["profiler_error"] = str(e)
    result["core_imported"] = "samprof._samprof" in sys.modules
    print(json.dumps(result))


if __name__ == "__main__":
    main()
