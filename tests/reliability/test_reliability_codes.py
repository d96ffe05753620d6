"""Code objects die while samples that name them wait to be symbolized
(docs/design.md §4): exec'd code, lambdas, eval'd expressions and reloaded
modules created and dropped as fast as possible while samprof samples at
5 kHz. No crash, no sanitizer report, and no sample names a function that
was not running when it was taken. Runs under ASan in `make test-sanitize`."""

from __future__ import annotations

import pytest
from support import SANITIZED
from support.native import GENERATED
from support.processes import last_json, run_script
from support.profiles import check_profile

# Names of code that is not user-recognizable Python but may appear in any
# profile: samprof's pseudo-frames and the names CPython gives to module
# bodies and comprehensions.
PSEUDO = {
    "<gc>",
    "<truncated>",
    "<native thread>",
    "<no Python frames>",
    "<samprof collector>",
    "<samprof: stack table full>",
    "<samprof: dropped, buffer full>",
    "<samprof: dropped, torn stack>",
}
ANONYMOUS = {"<module>", "<listcomp>", "<genexpr>", "<lambda>", "<dictcomp>", "<setcomp>"}


# Wall mode reads stacks when its sampler thread gets the GIL; with two
# threads trading the GIL around file writes nearly every tick lands in the
# reload's I/O, so wall mode churns in one thread.
@pytest.mark.parametrize("mode, threads", [("cpu", 2), ("wall", 1)])
def test_code_objects_dying_while_sampled(tmp_path, mode, threads):
    out = tmp_path / "churn.pb.gz"
    proc = run_script("code_churn.py", mode, "5000", "1.0", str(threads), str(out), timeout=120)
    result = last_json(proc.stdout)
    ran = set(result["ran"])
    alive = {tuple(x) for x in result["alive"]}
    alive_names = {name for _, name in alive}
    # The workload really churned: thousands of code objects were created
    # and dropped during the profile.
    assert result["iterations"] >= (200 if SANITIZED else 1000), result["iterations"]
    assert result["dropped"]["unknown_frames"] == 0, result["dropped"]

    view = check_profile(out.read_bytes())
    generated_hits = 0
    wrong = []
    for frames, labels, values in view.samples():
        label = labels.get("gen")
        for name, filename, _line in frames:
            tokens = set(GENERATED.findall(name)) | set(GENERATED.findall(filename))
            if tokens:
                # A generated function (or its module body, lambda or
                # comprehension): it must be the one the thread was running
                # when the sample was taken, and one the workload ran.
                generated_hits += values[0]
                if tokens != {label} or not tokens <= ran:
                    wrong.append((name, filename, label))
            elif name in PSEUDO or name in ANONYMOUS:
                continue
            elif (filename, name) not in alive and name not in alive_names:
                wrong.append((name, filename, label))
    assert not wrong, f"samples name functions that were not running: {wrong[:20]}"
    # The check above had something to check.
    assert generated_hits >= 20, (generated_hits, result["samples"])
