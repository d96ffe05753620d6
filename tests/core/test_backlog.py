"""The sample ring's backlog (docs/design.md §4): tests/native/backlog.c
embeds this Python, links samprof's ring and collect code, and checks that
samples waiting in the backlog keep their code objects' names through
those objects' deaths, that the backlog stays within its memory bound and
counts what it refuses, and that producers, the spilling round thread and
a draining reader racing each other lose and double nothing. Under the
sanitizer run it is built with ASan+UBSan."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from support.native import COLLECT_SOURCES, build_driver, libpython_flags, run_driver


def test_backlog_lifetime_bound_and_races(tmp_path: Path) -> None:
    binary = build_driver("backlog.c", COLLECT_SOURCES, tmp_path, libpython_flags() + ["-pthread"])
    env = dict(os.environ, PYTHONHOME=sys.base_prefix)
    env.pop("PYTHONPATH", None)
    r = run_driver(binary, [], env)
    assert "races: read" in r.stdout, r.stdout
