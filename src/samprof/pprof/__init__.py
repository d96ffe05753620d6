"""pprof profiles in pure Python: read, build, write, merge, diff.

Nothing here needs samprof's compiled core, so it runs wherever there are
profiles: a laptop reading files pulled from production, a CI job comparing
two runs. The format is google/pprof's ``profile.proto``; what ``go tool
pprof`` reads, this reads and writes::

    from samprof import pprof

    with open("cpu.pb.gz", "rb") as f:
        profile = pprof.read(f.read())
    cpu = profile.sample_type_index("cpu")
    for sample in profile.samples:
        leaf = profile.stack_of(sample)[0]
        print(sample.values[cpu], leaf.function, profile.labels_of(sample))

    total = pprof.merge([profile, pprof.read(other_bytes)])
    change = pprof.diff(total, base=pprof.read(yesterday_bytes))
    open("change.pb.gz", "wb").write(pprof.write(change))

Modules: :mod:`~samprof.pprof.profile` (the data model),
:mod:`~samprof.pprof.decode` (:func:`read`), :mod:`~samprof.pprof.encode`
(:func:`write`), :mod:`~samprof.pprof.ops` (:func:`merge`, :func:`diff`,
:func:`scale`, :func:`filter`, :func:`prune`, :func:`compact`) and
:mod:`~samprof.pprof.wire` (the field numbers).
"""

from samprof.pprof.decode import read
from samprof.pprof.encode import write
from samprof.pprof.ops import DIFF_BASE_LABEL, compact, diff, filter, merge, prune, scale
from samprof.pprof.profile import (
    Frame,
    Function,
    Label,
    Line,
    Location,
    Mapping,
    PprofError,
    Profile,
    Sample,
    ValueType,
)

__all__ = [
    "DIFF_BASE_LABEL",
    "Frame",
    "Function",
    "Label",
    "Line",
    "Location",
    "Mapping",
    "PprofError",
    "Profile",
    "Sample",
    "ValueType",
    "compact",
    "diff",
    "filter",
    "merge",
    "prune",
    "read",
    "scale",
    "write",
]
