"""Heap profiles estimate what each function allocated and still holds, as
measured by sys.getsizeof of what it made (tests/scripts/heap_workload.py).

At the default rate (512 KiB) an estimate from k sampled blocks has a
relative spread of about 1/sqrt(k): 400 MB allocated gives ~800 samples,
3.5%. In-use space is an estimate from one moment, ~100 samples for 50 MB
(10%), so it is checked as the mean over the workload's snapshots, as Go's
tests average repeated runs. Every comparison is retried at double the
size before it fails (tests/support/measure.py).
"""

from __future__ import annotations

import os
import statistics

import pytest
from support.measure import Miss, measure, within_ratio
from support.processes import last_json, run_script
from support.profiles import View, check_profile

pytestmark = pytest.mark.accuracy

RATE = 512 * 1024


def _flat(view: View, sample_type: str):
    """Leaf function -> value of sample_type."""
    return view.by_function(sample_type, cumulative=False)


def _run(tmp_path, scale, rate=RATE):
    out = tmp_path / f"x{scale:g}"
    out.mkdir()
    r = run_script("heap_workload.py", str(scale), str(out), str(rate), timeout=300)
    truth = last_json(r.stdout)
    final = check_profile((out / "final.pb.gz").read_bytes())
    snapshots = [View((out / f"keep-{i}.pb.gz").read_bytes()) for i in range(truth["rounds"])]
    return truth, final, snapshots


def test_alloc_and_inuse_space_match_what_functions_made(tmp_path):
    """Tolerances: alloc_space and in-use space 10% of the truth,
    alloc_objects 15% (the issue's bounds). The spread is one over the
    square root of the samples: about 7% for containers at half length
    (some 200 samples of 512 KiB), 5% at full length, 3.5% at twice it."""

    def attempt(scale):
        truth, final, snapshots = _run(tmp_path, scale)
        assert truth["untracked"] == 0, truth
        space = _flat(final, "alloc_space")
        objects = _flat(final, "alloc_objects")
        for fn in ("churn", "keep", "containers"):
            within_ratio(space.get(fn, 0), truth[fn]["space"], 0.10, f"{fn} alloc_space")
        within_ratio(objects.get("churn", 0), truth["churn"]["objects"], 0.15, "churn objects")
        held = [_flat(s, "inuse_space").get("keep", 0) for s in snapshots]
        within_ratio(
            statistics.mean(held), truth["keep"]["inuse"], 0.10, "keep in-use (mean)", held
        )

    measure(attempt)


def test_inuse_drops_back_when_objects_die(tmp_path):
    """What keep() held was released before the final profile: its in-use
    space there is what one sampled block could leave at most (none), while
    each snapshot showed most of the 50 MB."""
    truth, final, snapshots = _run(tmp_path, 0.5)
    inuse = _flat(final, "inuse_space")
    assert inuse.get("keep", 0) == 0, inuse
    assert _flat(final, "inuse_objects").get("keep", 0) == 0
    # churn's last batch (1,000 objects, 1 MB) is still alive: at most a
    # few samples' worth.
    assert inuse.get("churn", 0) < 8 * RATE
    for s in snapshots:
        if _flat(s, "inuse_space").get("keep", 0) < truth["keep"]["inuse"] / 3:
            raise Miss(f"a snapshot lost keep's live arrays: {_flat(s, 'inuse_space')}")


def test_every_allocation_at_rate_one(tmp_path):
    """rate=1 records every allocation: the estimate is the count itself,
    exact for churn's bytes objects (each one allocation of a known size;
    churn also makes one list iterator per batch, of another size)."""
    out = tmp_path / "exact"
    out.mkdir()
    r = run_script("heap_workload.py", "0.02", str(out), "1", timeout=300)
    truth = last_json(r.stdout)
    final = View((out / "final.pb.gz").read_bytes())
    assert final.msg.period == 1
    size = truth["churn"]["space"] // truth["churn"]["objects"]
    objects = space = 0
    for frames, labels, values in final.samples():
        if frames[0][0] == "churn" and labels["bytes"] == size:
            objects += values[0]
            space += values[1]
    assert objects == truth["churn"]["objects"]
    assert space == truth["churn"]["space"]
    assert os.path.getsize(out / "final.pb.gz") > 0
