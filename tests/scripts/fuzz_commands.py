"""Feeds every command that reads profiles broken files, and reports any
outcome but a right answer or a one-line error.

    python fuzz_commands.py CASES SEED DIRECTORY

Each case is a valid profile (pprof, or now and then cProfile's pstats)
broken one way (fuzz_pprof's mutations), written to a file in DIRECTORY
and given to each command (top and its views, collapsed, speedscope,
diff, merge) in this process. A command must return 0, or 1 with exactly
one line on stderr that starts with "samprof: error: " and names the
file when the file cannot be read; an exception, another status or a case running over 10 seconds
(SIGALRM) is a failure. Prints one JSON object: how many cases and
command runs, how many ended in an error line, and the failures (at most
5, each with the input in hex).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import marshal
import os
import random
import signal
import sys
import traceback
from typing import Any, Dict, List, Tuple

from fuzz_pprof import MUTATIONS, seed_profile

from samprof import _viewcli, pprof
from samprof.cli import _build_parser

CASE_SECONDS = 10


def seed_pstats() -> bytes:
    """A small pstats file as cProfile writes it (marshal'ed)."""
    stats = {
        ("a.py", 1, "a"): (2, 2, 0.1, 0.3, {("m.py", 2, "main"): (2, 2, 0.1, 0.3)}),
        ("m.py", 2, "main"): (1, 1, 0.0, 0.4, {}),
    }
    return marshal.dumps(stats)


def command_lines(path: str, good: str, out: str) -> List[List[str]]:
    return [
        ["top", path],
        ["top", path, "--cum", "--lines", "-n", "3"],
        ["top", path, "--callers", "main"],
        ["top", path, "--callees", "main"],
        ["top", path, "--focus", "a|main", "--tag", "k=v"],
        ["top", path, "--diff-base", good],
        ["collapsed", path],
        ["speedscope", path, "-o", out, "--by", "thread"],
        ["diff", good, path],
        ["diff", path, good, "--normalize"],
        ["merge", path, good, "-o", out],
    ]


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"over {CASE_SECONDS} s")


def run_one(parser: argparse.ArgumentParser, args: List[str]) -> Tuple[int, str]:
    opts = parser.parse_args(args)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = _viewcli.run(opts)
    return status, err.getvalue()


def main() -> None:
    cases, seed, directory = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = random.Random(seed)
    parser, _ = _build_parser()
    signal.signal(signal.SIGALRM, _alarm)
    good = os.path.join(directory, "good.pb")
    with open(good, "wb") as f:
        f.write(seed_profile())
    path = os.path.join(directory, "case")
    out = os.path.join(directory, "out")
    raw_pprof, raw_pstats = seed_profile(), seed_pstats()
    runs = errors = 0
    by_command: Dict[str, int] = {}
    failures: List[Dict[str, Any]] = []
    for _ in range(cases):
        if len(failures) >= 5:
            break
        raw = raw_pstats if rng.random() < 0.1 else raw_pprof
        name = rng.choice(list(MUTATIONS))
        data = MUTATIONS[name](rng, raw)
        if name != "damage_gzip" and raw is raw_pprof and rng.random() < 0.3:
            import gzip

            data = gzip.compress(data)
        with open(path, "wb") as f:
            f.write(data)
        readable = _viewcli.read_pstats(data) is not None
        if not readable:
            try:
                pprof.read(data)
                readable = True
            except pprof.PprofError:
                pass
        for args in command_lines(path, good, out):
            runs += 1
            by_command[args[0]] = by_command.get(args[0], 0) + 1
            signal.alarm(CASE_SECONDS)
            try:
                status, err = run_one(parser, args)
                problem = None
                if status == 1:
                    errors += 1
                    one_line = err.count("\n") == 1 and err.startswith("samprof: error: ")
                    if not one_line or (not readable and path not in err):
                        problem = f"status 1 with stderr {err!r}"
                elif status != 0:
                    problem = f"status {status} with stderr {err!r}"
            except BaseException as e:  # everything else is a finding
                problem = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
            finally:
                signal.alarm(0)
            if problem is not None:
                failures.append(
                    {"mutation": name, "command": args, "problem": problem, "input": data.hex()}
                )
                break
    print(
        json.dumps(
            {
                "cases": cases,
                "runs": runs,
                "error_lines": errors,
                "by_command": by_command,
                "failures": failures,
            }
        )
    )


if __name__ == "__main__":
    main()
