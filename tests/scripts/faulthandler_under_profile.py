"""faulthandler keeps working while samprof profiles.

Usage: faulthandler_under_profile.py dump OUT_FILE
       faulthandler_under_profile.py crash

dump: with faulthandler enabled, a watchdog armed with dump_traceback_later
and a handler registered for SIGUSR1, runs a CPU profile at 1 kHz; the
watchdog's dump and the SIGUSR1 dump land in OUT_FILE. Prints one JSON line.

crash: faulthandler enabled, a CPU profile running, then a segmentation
fault: faulthandler must print the traceback and the process must die of
SIGSEGV, as without samprof.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import signal
import sys

from support.workloads import burn_cpu

import samprof


def burning_while_watched() -> None:
    burn_cpu(0.6)


def crash_while_profiled() -> None:
    burn_cpu(0.05)
    # Read a page mapped without access rights (address 0 is not always
    # unmapped).
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    page = libc.mmap(None, 4096, 0, 0x22, -1, 0)  # PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS
    ctypes.string_at(page, 1)


def dump(out: str) -> None:
    with open(out, "w") as f:
        faulthandler.enable(file=f, all_threads=True)
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
        with samprof.CPUProfiler(hz=1000) as prof:
            faulthandler.dump_traceback_later(0.3, file=f)
            burning_while_watched()
            os.kill(os.getpid(), signal.SIGUSR1)
            burn_cpu(0.05)
        faulthandler.cancel_dump_traceback_later()
        faulthandler.unregister(signal.SIGUSR1)
        faulthandler.disable()
    print(json.dumps({"samples": prof.stats.samples if prof.stats else 0}), flush=True)


def crash() -> None:
    faulthandler.enable(file=sys.stderr, all_threads=True)
    prof = samprof.CPUProfiler(hz=1000)
    prof.start()
    crash_while_profiled()


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    else:
        crash()
