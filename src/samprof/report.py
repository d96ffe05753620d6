"""Text reports on a pprof profile, formatted the way ``go tool pprof`` does
(``top``, ``callers``), and on a cProfile one (``pstats_top``,
``pstats_callers``).

::

    from samprof.pprof import Profile
    from samprof.report import top

    profile = Profile.parse(open("cpu.pb.gz", "rb").read())
    print(top(profile, n=10), end="")

Values are formatted as pprof formats them: each one scaled to the largest
unit that keeps it at least 1 (``1.23s``, ``450ms``, ``12us``; ``64MB`` for
bytes), counts as plain integers.
"""

from __future__ import annotations

import datetime
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from samprof.pprof import DIFF_BASE_LABEL, Profile

__all__ = ["format_percent", "format_value", "top"]


class _Unit(NamedTuple):
    name: str  # canonical name, printed after the value
    aliases: Tuple[str, ...]  # lower case, singular
    factor: float  # size in the family's base unit


class _UnitFamily(NamedTuple):
    default: _Unit
    units: Tuple[_Unit, ...]  # smallest first


# The units pprof scales between, from its internal/measurement package.
_BYTE = _Unit("B", ("b", "byte"), 1)
_SECOND = _Unit("s", ("s", "sec", "second"), 1e9)
_UNIT_FAMILIES = (
    _UnitFamily(
        _BYTE,
        (
            _BYTE,
            _Unit("kB", ("kb", "kbyte", "kilobyte"), float(1 << 10)),
            _Unit("MB", ("mb", "mbyte", "megabyte"), float(1 << 20)),
            _Unit("GB", ("gb", "gbyte", "gigabyte"), float(1 << 30)),
            _Unit("TB", ("tb", "tbyte", "terabyte"), float(1 << 40)),
            _Unit("PB", ("pb", "pbyte", "petabyte"), float(1 << 50)),
        ),
    ),
    _UnitFamily(
        _SECOND,
        (
            _Unit("ns", ("ns", "nanosecond"), 1.0),
            _Unit("us", ("\u03bcs", "us", "microsecond"), 1e3),
            _Unit("ms", ("ms", "millisecond"), 1e6),
            _SECOND,
            _Unit("hrs", ("hour", "hr"), 3600e9),
        ),
    ),
)
_TIME = _UNIT_FAMILIES[1]

# Output units that mean "pick a unit for the value".
_AUTO_UNITS = ("auto", "minimum")


def _sniff_unit(family: _UnitFamily, unit: str) -> Optional[_Unit]:
    unit = unit.lower()
    if len(unit) > 2 and unit.endswith("s"):
        unit = unit[:-1]
    for candidate in family.units:
        if unit in candidate.aliases:
            return candidate
    return None


def _scale(value: int, from_unit: str, to_unit: str) -> Tuple[float, str]:
    """``value`` in ``from_unit`` converted to ``to_unit`` ("auto" picks the
    largest unit that keeps it at least 1); returns (number, unit suffix).
    Values in units pprof does not know are returned as they are."""
    if value < 0:
        scaled, suffix = _scale(-value, from_unit, to_unit)
        return -scaled, suffix
    for family in _UNIT_FAMILIES:
        source = _sniff_unit(family, from_unit)
        if source is None:
            continue
        base = value * source.factor
        target: Optional[_Unit]
        if to_unit in _AUTO_UNITS:
            target = None
            for candidate in family.units:
                factor = target.factor if target is not None else 0.0
                if candidate.factor >= factor and base / candidate.factor >= 1.0:
                    target = candidate
        else:
            target = _sniff_unit(family, to_unit)
        if target is None:
            target = family.default
        return base / target.factor, target.name
    if to_unit in ("count", "sample", "unit") + _AUTO_UNITS:
        return float(value), ""
    return float(value), to_unit


def format_value(value: int, unit: str, output_unit: str = "auto") -> str:
    """Format a sample value as pprof does, scaled to ``output_unit`` or, by
    default, to the largest unit that keeps it at least 1::

        format_value(1_230_000_000, "nanoseconds") == "1.23s"
        format_value(1_230_000_000, "nanoseconds", "ms") == "1230ms"
        format_value(42, "count") == "42"
    """
    scaled, suffix = _scale(value, unit, output_unit)
    text = f"{scaled:.2f}"
    if text.endswith(".00"):
        text = text[:-3]
    if text in ("0", "-0"):
        return "0"
    return text + suffix


def format_percent(value: int, total: int) -> str:
    """``value`` as a percentage of ``total``, six characters wide, as pprof
    prints it: ``"41.03%"``, ``"  100%"``, ``"  0.5%"``."""
    ratio = abs(value / total) * 100 if total else 0.0
    if 99.95 <= ratio <= 100.05:
        return "  100%"
    if ratio >= 1.0:
        return f"{ratio:5.2f}%"
    return f"{ratio:5.2g}%"


def _select_sample_index(profile: Profile, sample_type: Union[str, int, None]) -> int:
    if sample_type is None:
        return profile.default_sample_index()
    if isinstance(sample_type, int) or sample_type.isdigit():
        index = int(sample_type)
        if not 0 <= index < len(profile.sample_types):
            raise ValueError(
                f"sample index {index} out of range: profile has "
                f"{len(profile.sample_types)} sample types"
            )
        return index
    return profile.sample_type_index(sample_type)


def _format_time(time_nanos: int) -> str:
    """Local time like pprof's ``Jan 2, 2006 at 3:04pm (MST)``."""
    when = datetime.datetime.fromtimestamp(time_nanos / 1e9).astimezone()
    hour = when.hour % 12 or 12
    ampm = "am" if when.hour < 12 else "pm"
    return f"{when:%b} {when.day}, {when.year} at {hour}:{when:%M}{ampm} ({when.tzname()})"


def _profile_labels(profile: Profile, index: int, total: int, output_unit: str) -> List[str]:
    """The header lines pprof prints above a report."""
    lines = []
    if profile.mappings:
        first = profile.mappings[0]
        if first.filename:
            lines.append("File: " + os.path.basename(first.filename))
        if first.build_id:
            lines.append("Build ID: " + first.build_id)
    lines.extend(profile.comments)
    sample_type = profile.sample_types[index]
    lines.append("Type: " + sample_type.type)
    if profile.time_nanos:
        lines.append("Time: " + _format_time(profile.time_nanos))
    if profile.duration_nanos:
        duration = format_value(profile.duration_nanos, "nanoseconds")
        total_text = format_value(total, sample_type.unit, output_unit)
        line = f"Duration: {duration}, Total samples = {total_text}"
        # For time-valued samples pprof adds the share of wall-clock time.
        if total and _sniff_unit(_TIME, sample_type.unit) is not None:
            total_nanos = int(_scale(total, sample_type.unit, "ns")[0])
            line += f" ({format_percent(total_nanos, profile.duration_nanos)})"
        lines.append(line)
    return lines


def _output_unit(unit: str, shown: List[Tuple[str, int, int]], total: int) -> str:
    """The one unit pprof prints all of a report's values in (its default
    ``-unit=minimum``): the unit of the smallest shown value, or of 100 times
    it if the largest value needs a bigger unit, so that no value prints
    below 0.01."""
    smallest = 0
    for _name, flat, cum in shown:
        value = abs(flat) or abs(cum)
        if value and (smallest == 0 or value < smallest):
            smallest = value
    largest = total
    if smallest == 0:
        smallest = largest
    chosen = _scale(smallest, unit, "minimum")[1]
    if chosen != _scale(largest, unit, "minimum")[1] and smallest * 100 < largest:
        chosen = _scale(100 * smallest, unit, "minimum")[1]
    return chosen or unit


def frame_name(function: str, filename: str, line: int, lines: bool) -> str:
    """A frame as the text reports name it: the function, or with
    ``lines`` the function and where in its file (``handler app.py:42``)."""
    if not lines or not filename:
        return function
    return f"{function} {filename}:{line}"


def _inline_label(calls: Optional[Set[bool]]) -> str:
    if not calls or True not in calls:
        return ""
    return " (partial-inline)" if False in calls else " (inline)"


def top(
    profile: Profile,
    n: int = 20,
    sample_type: Union[str, int, None] = None,
    node_fraction: float = 0.005,
    cum: bool = False,
    lines: bool = False,
    of: Optional[Profile] = None,
    filters: Sequence[str] = (),
) -> str:
    """The ``n`` functions with the most flat value, as ``go tool pprof -top``
    prints them.

    ``sample_type`` is a sample type name (``"cpu"``, ``"samples"``) or an
    index; by default, the profile's ``default_sample_type`` or else its last
    sample type, as pprof does. Functions are grouped by name. A function's
    cumulative value counts each sample once, however many times the function
    recurses in it. Functions whose cumulative value is below
    ``node_fraction`` of the total are dropped first, as pprof drops them.
    For a diff (:func:`samprof.pprof.diff`), percentages are of the base's
    total, as pprof's ``-diff_base`` shows them. ``cum`` sorts by
    cumulative value (``-top -cum``); ``lines`` makes each line of a
    function a node of its own (``-lines``: ``handler app.py:42``).
    For a profile cut down from another (``--tag``, ``--focus``), ``of`` is
    that other: percentages are of its total, as pprof shows them with
    ``-tagfocus`` and ``-focus``, and ``filters`` name the cuts under
    "Active filters".
    Raises ValueError for an unknown sample type.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    index = _select_sample_index(profile, sample_type)
    unit = profile.sample_types[index].unit

    flat: Dict[str, int] = {}
    cums: Dict[str, int] = {}
    # function -> whether its calls from its callers were inlined (True),
    # not (False), or both, as pprof labels a node "(inline)" or
    # "(partial-inline)".
    calls_in: Dict[str, Set[bool]] = {}
    total = 0
    base_total = 0
    for sample in profile.samples:
        value = sample.values[index]
        total += abs(value)
        if DIFF_BASE_LABEL in sample.labels:
            base_total += abs(value)
        if value == 0:
            continue
        frames = profile.stack_of(sample)
        if not frames:
            continue
        names = [frame_name(f.function, f.filename, f.line, lines) for f in frames]
        flat[names[0]] = flat.get(names[0], 0) + value
        for name in set(names):
            cums[name] = cums.get(name, 0) + value
        # The call into each frame from the one above it (recursion aside):
        # inlined when the frame is not its location's outermost line.
        inlined = profile.inlined_of(sample)
        for i in range(len(names) - 1):
            if names[i] != names[i + 1]:
                calls_in.setdefault(names[i], set()).add(inlined[i])

    if of is not None:
        total = sum(abs(sample.values[index]) for sample in of.samples)
    if base_total:
        # A diff (samprof.pprof.diff, pprof -diff_base): shares are of the
        # base's total, as pprof computes them.
        total = base_total
    nodes = [(name, flat.get(name, 0), cums[name]) for name in cums if cums[name] or flat.get(name)]
    # pprof bases the cutoff on the sum of flat values, but prints it as a
    # fraction of the total.
    cutoff = abs(int(sum(f for _name, f, _cum in nodes) * node_fraction))
    kept = [node for node in nodes if abs(node[2]) >= cutoff]
    dropped = len(nodes) - len(kept)
    if cum:  # pprof's -cum order: cum (by magnitude), then name
        kept.sort(key=lambda node: (-abs(node[2]), node[0]))
    else:  # pprof's order: flat (by magnitude), then name, then cum.
        kept.sort(key=lambda node: (-abs(node[1]), node[0], -abs(node[2])))
    shown = kept[:n]
    output_unit = _output_unit(unit, shown, total)

    def fmt(value: int) -> str:
        return format_value(value, unit, output_unit)

    shown_flat = sum(f for _name, f, _cum in shown)
    out = _profile_labels(profile, index, total, output_unit)
    if filters:
        out.append("Active filters:")
        out.extend(f"   {f}" for f in filters)
    out.append(
        f"Showing nodes accounting for {fmt(shown_flat)}, "
        f"{format_percent(shown_flat, total).strip()} of {fmt(total)} total"
    )
    if total and dropped:
        noun = "nodes" if dropped > 1 else "node"
        out.append(f"Dropped {dropped} {noun} (cum <= {fmt(int(total * node_fraction))})")
    if total and len(shown) < len(kept):
        out.append(f"Showing top {len(shown)} nodes out of {len(kept)}")
    out.append(f"{'flat':>10} {'flat%':>6} {'sum%':>6} {'cum':>10} {'cum%':>6}")
    running = 0
    for name, flat_value, cum_value in shown:
        running += flat_value
        out.append(
            f"{fmt(flat_value):>10} {format_percent(flat_value, total)} "
            f"{format_percent(running, total)} {fmt(cum_value):>10} "
            f"{format_percent(cum_value, total)}  {name}{_inline_label(calls_in.get(name))}"
        )
    return "\n".join(out) + "\n"


def callers(profile: Profile, function: str, sample_type: Union[str, int, None] = None) -> str:
    """Who calls ``function`` (a function name), and how much of its
    cumulative value each call path brings: for every sample whose stack
    holds the function, its value goes to the frame that called it (once
    per sample, however deep it recurses). Raises ValueError when no
    sample holds the function."""
    return _peek(profile, function, sample_type, up=True)


def callees(profile: Profile, function: str, sample_type: Union[str, int, None] = None) -> str:
    """What ``function`` calls, and how much of its cumulative value goes
    to each: for every sample whose stack holds the function, its value
    goes to the frame it called, or to ``(self)`` where it is the leaf
    (once per sample, however deep it recurses). Raises ValueError when no
    sample holds the function."""
    return _peek(profile, function, sample_type, up=False)


def _peek(profile: Profile, function: str, sample_type: Union[str, int, None], up: bool) -> str:
    index = _select_sample_index(profile, sample_type)
    unit = profile.sample_types[index].unit
    by_other: Dict[str, int] = {}
    total = 0
    for sample in profile.samples:
        value = sample.values[index]
        stack = profile.stack_of(sample)  # leaf first
        if up:
            others = {
                stack[i + 1].function if i + 1 < len(stack) else "(root)"
                for i, frame in enumerate(stack)
                if frame.function == function
            }
        else:
            others = {
                stack[i - 1].function if i > 0 else "(self)"
                for i, frame in enumerate(stack)
                if frame.function == function
            }
        if others:
            total += value
        for other in others - {function}:
            by_other[other] = by_other.get(other, 0) + value
    if not by_other and total == 0:
        raise ValueError(f"no sample calls {function!r}")
    title, column = ("Callers of", "caller") if up else ("Callees of", "callee")
    lines = [
        f"{title} {function}: {format_value(total, unit)} in all",
        f"{'value':>10} {'share':>6}  {column}",
    ]
    for other, value in sorted(by_other.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"{format_value(value, unit):>10} {format_percent(value, total)}  {other}")
    return "\n".join(lines) + "\n"


# A pstats file (cProfile, marshal'ed): {(file, line, name): (primitive
# calls, calls, own time, cumulative time, {caller: (pcalls, calls, own,
# cumulative)})}, times in seconds.
PstatsData = Dict[Tuple[str, int, str], Tuple[int, int, float, float, Dict]]


def _pstats_name(key: Tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":  # built-in functions
        return name
    return f"{name} ({os.path.basename(filename)}:{line})"


def merge_pstats(parts: List[PstatsData]) -> PstatsData:
    """Several pstats files' data added up, as ``pstats.Stats.add`` does."""
    import pstats

    total = None
    for data in parts:
        stats = pstats.Stats(_PstatsSource(data))
        if total is None:
            total = stats
        else:
            total.add(stats)
    return {} if total is None else total.stats


class _PstatsSource:
    """What pstats.Stats takes in place of a profiler: create_stats() and
    a ``stats`` dict."""

    def __init__(self, data: PstatsData) -> None:
        self.stats = data

    def create_stats(self) -> None:
        pass


def pstats_top(data: PstatsData, n: int = 20) -> str:
    """The ``n`` functions that took the most time of their own in a
    cProfile profile, laid out as ``top`` lays out a pprof one, with their
    call counts: exact, where a sampling profile's are estimates."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    total = sum(v[2] for v in data.values())
    calls = sum(v[1] for v in data.values())
    ns = 1_000_000_000
    rows = sorted(data.items(), key=lambda kv: (-kv[1][2], -kv[1][3], _pstats_name(kv[0])))
    lines = [
        "Type: cProfile (exact call counts; wall time)",
        f"Showing the top {min(n, len(rows))} of {len(rows)} functions: "
        f"{format_value(int(total * ns), 'nanoseconds')} in {calls} calls",
        f"{'flat':>10} {'flat%':>6} {'sum%':>6} {'cum':>10} {'cum%':>6} {'calls':>10}  function",
    ]
    running = 0.0
    for key, (cc, nc, tt, ct, _) in rows[:n]:
        running += tt
        flat, cum = int(tt * ns), int(ct * ns)
        count = str(nc) if nc == cc else f"{nc}/{cc}"
        lines.append(
            f"{format_value(flat, 'nanoseconds'):>10} {format_percent(flat, int(total * ns))} "
            f"{format_percent(int(running * ns), int(total * ns))} "
            f"{format_value(cum, 'nanoseconds'):>10} {format_percent(cum, int(total * ns))} "
            f"{count:>10}  {_pstats_name(key)}"
        )
    return "\n".join(lines) + "\n"


def pstats_callers(data: PstatsData, function: str) -> str:
    """Who calls ``function`` (its name, as in ``pstats_top``'s list
    without the file and line) in a cProfile profile, with the exact
    number of calls each made and the time spent below those calls."""
    ns = 1_000_000_000
    keys = [key for key in data if key[2] == function]
    if not keys:
        raise ValueError(f"no function named {function!r} in the profile")
    lines = []
    for key in sorted(keys):
        cc, nc, tt, ct, by_caller = data[key]
        lines.append(
            f"Callers of {_pstats_name(key)}: {nc} calls, "
            f"{format_value(int(ct * ns), 'nanoseconds')} cumulative"
        )
        lines.append(f"{'calls':>10} {'cum':>10}  caller")
        rows = sorted(by_caller.items(), key=lambda kv: (-kv[1][1], _pstats_name(kv[0])))
        for caller, value in rows:
            # Python 3.9+ keeps (pcalls, calls, own, cumulative) per caller.
            calls = value[1] if isinstance(value, tuple) else value
            cum = value[3] if isinstance(value, tuple) else 0.0
            lines.append(
                f"{calls:>10} {format_value(int(cum * ns), 'nanoseconds'):>10}  "
                f"{_pstats_name(caller)}"
            )
    return "\n".join(lines) + "\n"
