"""Two profile sessions alive at once, as a heap profile beside an
on-demand CPU profile will be. tests/native/sessions.c embeds this Python,
links samprof's collect.c and what it needs, kills code objects while both
sessions hold them, closes one session and kills more, and checks that each
session names every frame right: one code watcher, many subscribers. Under
the sanitizer run it is built with ASan+UBSan."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict

from support import SANITIZED
from support.native import COLLECT_SOURCES, build_driver, libpython_flags, run_driver

from samprof.pprof import read


def test_code_death_reaches_every_live_session(tmp_path: Path) -> None:
    binary = build_driver("sessions.c", COLLECT_SOURCES, tmp_path, libpython_flags())
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
