"""Two profile sessions alive at once, as a heap profile beside an
on-demand CPU profile will be. tests/native/sessions.c embeds this Python,
links samprof's collect.c and what it needs, kills code objects while both
sessions hold them, closes one session and kills more, and checks that each
session names every frame right: one code watcher, many subscribers. Under
the sanitizer run it is built with ASan+UBSan."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List

from support import NATIVE, SANITIZED, TESTS

from samprof.pprof import read

CORE = os.path.join(os.path.dirname(TESTS), "src", "samprof", "_c")
# collect.c and everything it calls; none of it starts a sampler.
SOURCES = ["collect.c", "symbols.c", "frames.c", "ring.c", "profile.c", "pprof.c", "pb.c", "htab.c"]


def _libpython_flags() -> List[str]:
    """How to link this Python's libpython (shared, or static in LIBPL)."""
    cfg = sysconfig.get_config_var
    libdir = cfg("LIBDIR")
    if not os.path.exists(os.path.join(libdir, cfg("LDLIBRARY"))):
        libdir = cfg("LIBPL")
    flags = [f"-L{libdir}", f"-lpython{cfg('LDVERSION')}", f"-Wl,-rpath,{libdir}"]
    return flags + (cfg("LIBS") or "").split() + (cfg("SYSLIBS") or "").split()


def _build(tmp_path: Path) -> Path:
    binary = tmp_path / "sessions"
    flags = ["-O1", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Werror"]
    if SANITIZED:
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
        flags += ["-fno-omit-frame-pointer"]
    sources = [os.path.join(NATIVE, "sessions.c")] + [os.path.join(CORE, f) for f in SOURCES]
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        ["gcc", *flags, f"-I{include}", f"-I{CORE}", "-o", str(binary), *sources]
        + _libpython_flags(),
        check=True,
        timeout=180,
    )
    return binary


def test_code_death_reaches_every_live_session(tmp_path: Path) -> None:
    binary = _build(tmp_path)
    out = tmp_path / "b.pb"
    env = dict(os.environ, PYTHONHOME=sys.base_prefix)
    # The driver links its own sanitizer runtime when it has one.
    env.pop("LD_PRELOAD", None)
    env.pop("PYTHONPATH", None)
    # pymalloc gives freed code objects' memory to new ones at once, which
    # is what a session not told of a death would misname; ASan's allocator
    # quarantines freed memory instead, and checks every access.
    args = [str(binary), "--need-reuse" if not SANITIZED else "--no-reuse-check", str(out)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"sessions failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr

    # The surviving session's profile, read back: every function once.
    p = read(out.read_bytes())
    counts: Dict[str, int] = {}
    for s in p.samples:
        leaf = p.stack_of(s)[0].function
        counts[leaf] = counts.get(leaf, 0) + s.values[0]
    want = {f"{prefix}_{i}": 1 for prefix in ("old", "new", "newest") for i in range(200)}
    assert counts == want
