"""fork() while profiling (docs/design.md §5, §11): forked children that work
and exit, a multiprocessing Pool with the fork start method, and children
that exec. Nothing hangs or crashes; profiling is off in the children and
can be started there anew; the parent's profile goes on."""

from __future__ import annotations

import pytest
from support.processes import last_json, run_script
from support.profiles import check_profile


@pytest.mark.parametrize(
    "mode, scenario",
    [
        ("cpu", "fork"),
        ("cpu", "pool"),
        ("cpu", "exec"),
        ("wall", "fork"),
        ("wall", "pool"),
        ("wall", "exec"),
        # samprof imported but idle in the parent: a child may still start
        # its own profile (a pre-fork server's workers do).
        ("none", "fork"),
    ],
)
def test_fork_while_profiling(tmp_path, mode, scenario):
    out = tmp_path / "parent.pb.gz"
    proc = run_script("fork_while_profiling.py", mode, scenario, str(out), timeout=150)
    last_json(proc.stdout)
    if mode == "none":
        return
    view = check_profile(out.read_bytes())
    # Samples taken after the forks, in the parent.
    after = sum(
        values[0]
        for frames, labels, values in view.samples()
        if labels.get("phase") == "after-fork" and any(f[0] == "after_fork_burn" for f in frames)
    )
    assert after >= 50, f"only {after} samples after the forks"
