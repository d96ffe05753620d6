"""Every profile a test produces is checked by ``go tool pprof`` and by an
independent protobuf decoder (support.pprof_proto)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import defaultdict
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import pytest

from support import pprof_proto


def go_binary() -> str:
    """The go tool. Tests that need it fail, not skip, when it is missing:
    `make deps` (run by .ci/run) installs Debian's golang-go."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("`go` is not installed: run `make deps` (apt-get install golang-go)")
    return go


def go_pprof(data: bytes, *args: str) -> str:
    """Runs `go tool pprof <args> FILE` on data and returns its stdout."""
    with tempfile.NamedTemporaryFile(suffix=".pb.gz", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        return go_pprof_files([path], *args)
    finally:
        os.unlink(path)


def go_pprof_files(
    paths: Sequence[Union[str, "os.PathLike[str]"]], *args: str, text: bool = True
) -> Any:
    """Runs `go tool pprof <args> PATH...` (several paths: pprof merges
    them) and returns its stdout: str, or bytes when text is false (for
    -proto)."""
    env = dict(os.environ, PPROF_TMPDIR=tempfile.gettempdir(), HOME=os.environ.get("HOME", "/tmp"))
    # The sanitizer runtime must not be injected into the Go binary.
    env.pop("LD_PRELOAD", None)
    r = subprocess.run(
        [go_binary(), "tool", "pprof", *args, *map(str, paths)],
        capture_output=True,
        text=text,
        timeout=120,
        env=env,
    )
    stderr = r.stderr if text else r.stderr.decode(errors="replace")
    assert r.returncode == 0, f"go tool pprof {' '.join(args)} failed:\n{stderr}"
    return r.stdout


class View:
    """A decoded profile with the questions tests ask of it."""

    def __init__(self, data: bytes) -> None:
        self.msg = pprof_proto.decode(data)
        pprof_proto.check_well_formed(self.msg)
        m = self.msg
        self.strings = list(m.string_table)
        self.types = [(self.strings[t.type], self.strings[t.unit]) for t in m.sample_type]
        self.functions = {f.id: f for f in m.function}
        self.locations = {loc.id: loc for loc in m.location}
        self.comments = [self.strings[c] for c in m.comment]
        self.default_sample_type = self.strings[m.default_sample_type]

    def frames(self, sample) -> List[Tuple[str, str, int]]:
        """(function name, file name, line) leaf first."""
        out = []
        for lid in sample.location_id:
            for line in self.locations[lid].line:
                f = self.functions[line.function_id]
                out.append((self.strings[f.name], self.strings[f.filename], line.line))
        return out

    def labels(self, sample) -> Dict[str, object]:
        d: Dict[str, object] = {}
        for lab in sample.label:
            key = self.strings[lab.key]
            d[key] = self.strings[lab.str] if lab.str else lab.num
        return d

    def samples(self) -> Iterator[Tuple[List[Tuple[str, str, int]], Dict[str, object], List[int]]]:
        for s in self.msg.sample:
            yield self.frames(s), self.labels(s), list(s.value)

    def value_index(self, type_name: str) -> int:
        return [t for t, _ in self.types].index(type_name)

    def total(self, type_name: str = "cpu") -> int:
        i = self.value_index(type_name)
        return sum(v[i] for _, _, v in self.samples())

    def by_function(self, type_name: str = "cpu", cumulative: bool = True) -> Dict[str, int]:
        """Function name -> value; cumulative counts a function once per sample."""
        i = self.value_index(type_name)
        out: Dict[str, int] = defaultdict(int)
        for frames, _, v in self.samples():
            names = [f[0] for f in frames]
            for name in set(names) if cumulative else names[:1]:
                out[name] += v[i]
        return dict(out)

    def by_label(self, key: str, type_name: str = "cpu") -> Dict[Optional[object], int]:
        i = self.value_index(type_name)
        out: Dict[Optional[object], int] = defaultdict(int)
        for _, labels, v in self.samples():
            out[labels.get(key)] += v[i]
        return dict(out)


def check_profile(data: bytes, go: bool = True) -> View:
    """Decodes data independently, checks pprof's invariants, and has
    `go tool pprof` read it (-top and -raw)."""
    view = View(data)
    if go:
        go_pprof(data, "-top")
        go_pprof(data, "-raw")
    return view


def top_table(report: str) -> List[List[str]]:
    """The rows of a -top report (go tool pprof's or samprof's), each a
    list of cells."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["flat", "flat%"])
    return [line.split() for line in lines[start + 1 :]]


def top_showing(report: str) -> str:
    """A -top report's "Showing nodes accounting for ..." line."""
    return next(line.rstrip() for line in report.splitlines() if line.startswith("Showing nodes"))


def cpu_profile(stacks: Dict[str, int], period: int = 10_000_000, **header: Any) -> Any:
    """A samprof.pprof Profile shaped like a CPU profile (samples/count,
    cpu/nanoseconds, period ``period``) with one sample per entry of
    ``stacks``: ``{"leaf;caller;root": samples}``, each frame in a file
    named after its function. ``header`` sets other Profile fields."""
    from samprof.pprof import Frame, Profile, ValueType

    p = Profile(
        sample_types=[ValueType("samples", "count"), ValueType("cpu", "nanoseconds")],
        period_type=ValueType("cpu", "nanoseconds"),
        period=period,
        **header,
    )
    for stack, count in stacks.items():
        frames = [Frame(name, f"{name}.py", 1) for name in stack.split(";")]
        p.add_sample(frames, [count, count * period])
    return p


# `go tool pprof -raw` prints each sample as "v1 v2 ...: id id ..." and its
# labels on the following lines as "key:[value value]" (string labels on one
# line, numeric ones on the next).
_RAW_SAMPLE = re.compile(r"^\s*(-?\d+(?:\s+-?\d+)*):((?:\s+\d+)*)\s*$")
_RAW_LABEL = re.compile(r"(\S+):\[([^\]]*)\]")


def parse_raw(text: str) -> List[Tuple[Tuple[int, ...], Tuple[str, ...], Dict[str, str]]]:
    """The samples of a -raw listing: (values, function names leaf first,
    labels). pprof renumbers locations, so stacks are compared by name."""
    samples: List[Tuple[Tuple[int, ...], Tuple[int, ...], Dict[str, str]]] = []
    names: Dict[int, List[str]] = {}
    section = ""
    current = 0
    for line in text.splitlines():
        if line.startswith(("Samples:", "Locations", "Mappings")):
            section = line.split()[0].rstrip(":")
            continue
        if section == "Samples":
            m = _RAW_SAMPLE.match(line)
            if m:
                values = tuple(int(v) for v in m.group(1).split())
                ids = tuple(int(i) for i in m.group(2).split())
                samples.append((values, ids, {}))
            elif samples:
                for key, value in _RAW_LABEL.findall(line):
                    samples[-1][2][key] = value
        elif section == "Locations":
            # "     5: 0x7f0000000abc M=2 inner lib.c:7 s=5(...)", then one
            # line per further inlined function: "        outer lib.c:22 s=20()".
            # A name may hold spaces ("<samprof: stack table full>"); the
            # file:line and s=start fields end the line.
            m = re.match(r"^\s*(\d+): 0x[0-9a-f]+ (?:M=\d+ )?(.*) \S*:-?\d+ s=", line)
            if m:
                current = int(m.group(1))
                names[current] = [m.group(2)]
            elif line.strip():
                names[current].append(re.sub(r" \S*:-?\d+ s=.*$", "", line.strip()))
    return [
        (values, tuple(n for i in ids for n in names[i]), labels) for values, ids, labels in samples
    ]
