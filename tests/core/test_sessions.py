"""Two profile sessions alive at once, as a heap profile beside an
on-demand CPU profile will be. tests/native/sessions.c embeds this Python,
links samprof's collect.c and what it needs, kills code objects while both
sessions hold them, closes one session and kills more, and checks that each
session names every frame right: one code watcher, many subscribers. Under
the sanitizer run it is built with ASan+UBSan."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List

from support import SANITIZED
from support.native import build_driver, run_driver

from samprof.pprof import read

# collect.c and everything it calls; none of it starts a sampler.
SOURCES = ["collect.c", "symbols.c", "frames.c", "ring.c", "profile.c", "pprof.c", "pb.c", "htab.c"]


def _libpython_flags() -> List[str]:
    """How to compile against and link this Python's libpython (shared, or
    static in LIBPL)."""
    cfg = sysconfig.get_config_var
    libdir = cfg("LIBDIR")
    if not os.path.exists(os.path.join(libdir, cfg("LDLIBRARY"))):
        libdir = cfg("LIBPL")
    flags = [f"-I{sysconfig.get_paths()['include']}", f"-L{libdir}"]
    flags += [f"-lpython{cfg('LDVERSION')}", f"-Wl,-rpath,{libdir}"]
    return flags + (cfg("LIBS") or "").split() + (cfg("SYSLIBS") or "").split()


def test_code_death_reaches_every_live_session(tmp_path: Path) -> None:
    binary = build_driver("sessions.c", SOURCES, tmp_path, _libpython_flags())
    out = tmp_path / "b.pb"
    env = dict(os.environ, PYTHONHOME=sys.base_prefix)
    env.pop("PYTHONPATH", None)
    # pymalloc gives freed code objects' memory to new ones at once, which
    # is what a session not told of a death would misname; ASan's allocator
    # quarantines freed memory instead, and checks every access.
    reuse = "--need-reuse" if not SANITIZED else "--no-reuse-check"
    run_driver(binary, [reuse, str(out)], env)

    # The surviving session's profile, read back: every function once.
    p = read(out.read_bytes())
    counts: Dict[str, int] = {}
    for s in p.samples:
        leaf = p.stack_of(s)[0].function
        counts[leaf] = counts.get(leaf, 0) + s.values[0]
    want = {f"{prefix}_{i}": 1 for prefix in ("old", "new", "newest") for i in range(200)}
    assert counts == want
