"""A program for `samprof serve` that forks: two children, then waits for
them. Each child works until the file STOP exists (20 s at most) and leaves
by sys.exit (the first, through the interpreter's exit) or os._exit (the
second, which skips it, as multiprocessing's fork workers do). The
children's pids, in that order, go to the file STOP.children.

Usage: serve_forks.py STOP
"""

from __future__ import annotations

import os
import sys
import time


def forked_child_work(stop: str) -> None:
    end = time.monotonic() + 20
    n = 0
    while not os.path.exists(stop) and time.monotonic() < end:
        # About 0.2 ms of CPU a millisecond: a 1 s CPU profile at 100 Hz
        # expects some 15 samples of it, not the 2 of a lighter loop.
        n += sum(range(10_000))
        time.sleep(0.001)


def main() -> int:
    stop = sys.argv[1]
    children = []
    for how in ("sys.exit", "os._exit"):
        pid = os.fork()
        if pid == 0:
            forked_child_work(stop)
            if how == "os._exit":
                os._exit(0)
            sys.exit(0)
        children.append(pid)
    with open(stop + ".children", "w") as f:
        f.write(" ".join(map(str, children)))
    statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    return 0 if statuses == [0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
