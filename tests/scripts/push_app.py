"""A program that profiles itself continuously with samprof.continuous,
every setting from the SAMPROF_PUSH_* variables, as a deployment would.

    push_app.py SECONDS [exit|fork|sigterm]

Starts the agent unless one runs (samprof serve --push starts one), burns
CPU under the label route=/work for SECONDS, then: ``exit`` ends
normally (the last part goes at exit); ``fork`` forks first, parent and
child both working and ending normally; ``sigterm`` kills itself with
SIGTERM after the work (no handler of its own). Prints, as JSON, its pid,
the CPU it spent working, and when the work ended (time.time), for the
parent to compare with when the process ended.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from support.workloads import burn_python_for

import samprof
import samprof.continuous


def work(seconds: float) -> float:
    with samprof.labels(route="/work"):
        return burn_python_for(seconds)


def main() -> None:
    seconds = float(sys.argv[1])
    how = sys.argv[2] if len(sys.argv) > 2 else "exit"
    if samprof.continuous.current() is None:  # (samprof serve --push started one)
        samprof.continuous.start()
    child = 0
    if how == "fork":
        child = os.fork()
    cpu = work(seconds)
    print(json.dumps({"pid": os.getpid(), "cpu": cpu, "ended": time.time()}), flush=True)
    if how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # not reached: SIGTERM ends the process
    if child:
        _, status = os.waitpid(child, 0)
        sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
