"""Operations on whole profiles, with the semantics of google/pprof's
``profile`` package (``merge.go``, ``prune.go``, ``profile.go``), so that what
samprof computes is what ``go tool pprof`` shows for the same files::

    from samprof.pprof import diff, filter, merge, prune, read, scale, write

    total = merge([read(a), read(b)])           # go tool pprof -proto a b
    change = diff(read(new), read(old))         # go tool pprof -diff_base old new
    one_route = filter(total, labels={"route": "/users"})
    no_stdlib = prune(total, r"threading\\..*")  # drop those frames and below

Every operation returns a new profile and leaves its inputs as they were.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import (
    Collection,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)
from typing import Mapping as Dictlike

from samprof.pprof.profile import (
    Function,
    Label,
    Line,
    Location,
    Mapping,
    Profile,
    Sample,
)
from samprof.pprof.wire import U64_MASK

__all__ = ["DIFF_BASE_LABEL", "compact", "diff", "filter", "merge", "prune", "scale"]

# The label pprof puts on the samples of a diff's base (``-diff_base``); its
# reports take their total from these samples.
DIFF_BASE_LABEL = Label("pprof::base", str_value="true")


def merge(profiles: Iterable[Profile]) -> Profile:
    """Merge profiles into one, as ``go tool pprof`` merges several files.

    The profiles must have the same sample types and period type (type and
    unit), else ValueError says which differ. Functions, locations and
    mappings that are equal are made one; samples with the same stack and
    labels are added up; samples whose values are all zero are dropped. The
    result's ``time_nanos`` is the earliest start, ``duration_nanos`` the
    sum, ``period`` the largest, comments are kept once each in order, and
    the other header fields come from the first profile.

    Raises ValueError if ``profiles`` is empty.
    """
    sources = list(profiles)
    if not sources:
        raise ValueError("no profiles to merge")
    for i, other in enumerate(sources[1:], start=1):
        _check_compatible(sources[0], other, i)
    merger = _Merger(_combined_header(sources))
    for source in sources:
        merger.add(source)
    merged = merger.out
    merged.validate()  # also indexes what the merger appended
    if any(not any(sample.values) for sample in merged.samples):
        # Values that cancelled out (a diff): merge again to drop them and
        # whatever only they used.
        return merge([merged])
    return merged


def compact(profile: Profile) -> Profile:
    """The profile merged with itself alone: equal functions, locations and
    samples made one, zero samples and unused entries dropped, ids
    renumbered from 1 (pprof's ``Compact``)."""
    return merge([profile])


def diff(profile: Profile, base: Profile) -> Profile:
    """What ``go tool pprof -diff_base BASE PROFILE`` shows: ``base``'s
    values negated, each of its samples labelled ``pprof::base=true``, and
    the two merged. Positive values are what ``profile`` spent more;
    reports (``samprof top``, pprof's) take percentages of the base's total.

    Raises ValueError if the two have different sample or period types.
    """
    _check_compatible(profile, base, 1)
    negated = scale(base, -1)
    for sample in negated.samples:
        sample.labels = [lb for lb in sample.labels if lb.key != DIFF_BASE_LABEL.key]
        sample.labels.append(DIFF_BASE_LABEL)
    return merge([profile, negated])


def scale(profile: Profile, factor: Union[float, Sequence[float]]) -> Profile:
    """Every sample value multiplied by ``factor`` (one number, or one per
    sample type) and rounded half away from zero, as pprof's ``ScaleN``
    rounds. Samples whose values all become zero are dropped.

    Raises ValueError if a list of factors does not have one per sample
    type, or a factor is not finite.
    """
    if isinstance(factor, (int, float)):
        factors = [float(factor)] * len(profile.sample_types)
    else:
        factors = [float(f) for f in factor]
        if len(factors) != len(profile.sample_types):
            raise ValueError(
                f"{len(factors)} scale factors for {len(profile.sample_types)} sample types"
            )
    for f in factors:
        if not math.isfinite(f):
            raise ValueError(f"scale factor must be finite, not {f}")
    samples = []
    for sample in profile.samples:
        values = [v if f == 1 else _round_half_away(v * f) for v, f in zip(sample.values, factors)]
        if any(values):
            samples.append(Sample(list(sample.location_ids), values, list(sample.labels)))
    return _with_samples(profile, samples)


def filter(
    profile: Profile,
    labels: Dictlike[str, Union[str, int, Collection[Union[str, int]]]],
) -> Profile:
    """The samples that carry every given label: ``{"route": "/users"}``
    keeps samples labelled ``route=/users``; a collection of values keeps any
    of them (``{"route": ["/a", "/b"]}``). String values match string
    labels, ints match numeric ones. Entries no kept sample uses are
    dropped; ids are kept.
    """
    wanted: Dict[str, frozenset] = {}
    for key, value in labels.items():
        if isinstance(value, (str, int)):
            wanted[key] = frozenset([value])
        else:
            wanted[key] = frozenset(value)
    kept = []
    for sample in profile.samples:
        have: Dict[str, set] = {}
        for label in sample.labels:
            have.setdefault(label.key, set()).add(label.value)
        if all(have.get(key, set()) & values for key, values in wanted.items()):
            kept.append(Sample(list(sample.location_ids), list(sample.values), list(sample.labels)))
    return _drop_unused(_with_samples(profile, kept))


def prune(profile: Profile, drop: str, keep: Optional[str] = None) -> Profile:
    """Cut frames out of every stack, as pprof does with a profile's
    ``drop_frames``: a frame whose function name matches the regular
    expression ``drop`` (the whole name, as pprof anchors it) and not
    ``keep`` is removed together with every frame it called. Frames between
    the root and the first frame that matches neither are never cut, so no
    stack is cut away entirely. Stacks that become equal are not merged
    (:func:`compact` does that); entries no sample uses are dropped.

    Raises re.error for an invalid expression.
    """
    drop_rx = re.compile(f"^(?:{drop})$")
    keep_rx = re.compile(f"^(?:{keep})$") if keep is not None else None
    cache: Dict[str, bool] = {}

    def matches(name: str) -> bool:
        hit = cache.get(name)
        if hit is None:
            hit = bool(drop_rx.match(name)) and not (keep_rx and keep_rx.match(name))
            cache[name] = hit
        return hit

    # Per location: prune it whole (its outermost line matches), or cut its
    # inlined lines below the outermost line that matches.
    pruned: Dict[int, bool] = {}
    prune_beneath: Dict[int, bool] = {}
    locations: List[Location] = []
    for location in profile.locations:
        lines = location.lines
        hit = -1
        for i in range(len(lines) - 1, -1, -1):
            function = profile._functions_by_id.get(lines[i].function_id)
            if function is not None and function.name and matches(function.name):
                hit = i
                break
        if hit >= 0:
            prune_beneath[location.id] = True
            if hit == len(lines) - 1:
                pruned[location.id] = True
            else:
                lines = lines[hit + 1 :]
        locations.append(replace(location, lines=list(lines)))

    samples = []
    for sample in profile.samples:
        ids = list(sample.location_ids)
        found_user = False
        # From the root towards the leaf.
        for i in range(len(ids) - 1, -1, -1):
            location_id = ids[i]
            if location_id not in pruned and location_id not in prune_beneath:
                found_user = True
                continue
            if not found_user:
                continue
            ids = ids[i + 1 :] if location_id in pruned else ids[i:]
            break
        samples.append(Sample(ids, list(sample.values), list(sample.labels)))
    out = _with_samples(profile, samples)
    out.locations = locations
    return _drop_unused(out)


# --------------------------------------------------------------------------


def _round_half_away(x: float) -> int:
    """Go's math.Round: halves go away from zero (Python's round() goes to
    even)."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _check_compatible(first: Profile, other: Profile, index: int) -> None:
    """ValueError unless ``other`` (profile number ``index``) has the same
    period type and sample types as ``first``."""
    if first.sample_types != other.sample_types:
        mine = " ".join(map(str, first.sample_types)) or "none"
        theirs = " ".join(map(str, other.sample_types)) or "none"
        raise ValueError(
            f"profile {index} has sample types [{theirs}], profile 0 has [{mine}]: "
            "they cannot be merged"
        )
    if first.period_type != other.period_type:
        mine, theirs = (
            str(vt) if vt.type or vt.unit else "none"
            for vt in (first.period_type, other.period_type)
        )
        raise ValueError(
            f"profile {index} has period type {theirs}, profile 0 has {mine}: they cannot be merged"
        )


def _combined_header(sources: List[Profile]) -> Profile:
    """pprof's combineHeaders: an empty profile with the merged header."""
    time_nanos = duration_nanos = period = 0
    comments: List[str] = []
    default_sample_type = ""
    for source in sources:
        # pprof's rule, quirk included: a zero start replaces a non-zero one.
        if time_nanos == 0 or source.time_nanos < time_nanos:
            time_nanos = source.time_nanos
        duration_nanos += source.duration_nanos
        period = max(period, source.period)
        for comment in source.comments:
            if comment not in comments:
                comments.append(comment)
        default_sample_type = default_sample_type or source.default_sample_type
    first = sources[0]
    return Profile(
        sample_types=list(first.sample_types),
        drop_frames=first.drop_frames,
        keep_frames=first.keep_frames,
        time_nanos=time_nanos,
        duration_nanos=duration_nanos,
        period_type=first.period_type,
        period=period,
        comments=comments,
        default_sample_type=default_sample_type,
        doc_url=first.doc_url,
    )


_SampleKey = Tuple[Tuple[int, ...], Tuple[Tuple[str, str, int, str], ...]]
_LocationKey = Tuple[int, int, Tuple[Tuple[int, int, int], ...], bool]
_FunctionKey = Tuple[int, str, str, str]
_MappingKey = Tuple[int, int, str]


class _Merger:
    """pprof's profileMerger: maps each source's entries into ``out``,
    making equal ones one. The ``*_by_id`` tables are per source; the
    others span the merge."""

    def __init__(self, out: Profile) -> None:
        self.out = out
        self.samples: Dict[_SampleKey, Sample] = {}
        self.locations: Dict[_LocationKey, Location] = {}
        self.functions: Dict[_FunctionKey, Function] = {}
        self.mappings: Dict[_MappingKey, Mapping] = {}
        self.source = out
        self.locations_by_id: Dict[int, Location] = {}
        self.functions_by_id: Dict[int, Function] = {}
        # source mapping id -> (merged mapping, address offset)
        self.mappings_by_id: Dict[int, Tuple[Mapping, int]] = {}

    def add(self, source: Profile) -> None:
        self.source = source
        self.locations_by_id = {}
        self.functions_by_id = {}
        self.mappings_by_id = {}
        if not self.out.mappings and source.mappings:
            # The first mapping is the main binary's: keep it first.
            self._mapping(source.mappings[0])
        for sample in source.samples:
            if any(sample.values):
                self._sample(sample)

    def _sample(self, src: Sample) -> None:
        ids = tuple(self._location(self.source.location(i)).id for i in src.location_ids)
        # Sorted by key only: pprof keeps the order of a key's values.
        labels = tuple(
            sorted(
                ((lb.key, lb.str_value, lb.num, lb.num_unit) for lb in src.labels),
                key=lambda t: t[0],
            )
        )
        key = (ids, labels)
        existing = self.samples.get(key)
        if existing is not None:
            existing.values = [a + b for a, b in zip(existing.values, src.values)]
            return
        sample = Sample(list(ids), list(src.values), list(src.labels))
        self.samples[key] = sample
        self.out.samples.append(sample)

    def _location(self, src: Location) -> Location:
        known = self.locations_by_id.get(src.id)
        if known is not None:
            return known
        mapping, offset = (None, 0)
        if src.mapping_id:
            mapping, offset = self._mapping(self.source.mapping(src.mapping_id))
        lines = [Line(self._function(ln.function_id), ln.line, ln.column) for ln in src.lines]
        location = Location(
            id=len(self.out.locations) + 1,
            mapping_id=mapping.id if mapping is not None else 0,
            address=(src.address + offset) & U64_MASK,
            lines=lines,
            is_folded=src.is_folded,
        )
        # The address relative to the mapping, so that the same code loaded
        # at another address in another process is one location.
        relative = location.address - (mapping.memory_start if mapping is not None else 0)
        key = (
            relative,
            location.mapping_id,
            tuple((ln.function_id, ln.line, ln.column) for ln in lines),
            location.is_folded,
        )
        existing = self.locations.get(key)
        if existing is not None:
            self.locations_by_id[src.id] = existing
            return existing
        self.locations_by_id[src.id] = location
        self.locations[key] = location
        self.out.locations.append(location)
        return location

    def _function(self, function_id: int) -> int:
        if not function_id:
            return 0
        known = self.functions_by_id.get(function_id)
        if known is not None:
            return known.id
        src = self.source.function(function_id)
        key = (src.start_line, src.name, src.system_name, src.filename)
        function = self.functions.get(key)
        if function is None:
            function = replace(src, id=len(self.out.functions) + 1)
            self.functions[key] = function
            self.out.functions.append(function)
        self.functions_by_id[function_id] = function
        return function.id

    def _mapping(self, src: Mapping) -> Tuple[Mapping, int]:
        known = self.mappings_by_id.get(src.id)
        if known is not None:
            return known
        # pprof's key: size rounded up to 4 KiB, offset, and build id or
        # else file name; two fake mappings (neither) are one.
        size = src.memory_limit - src.memory_start
        size = (size + 0xFFF) // 0x1000 * 0x1000
        key = (size, src.file_offset, src.build_id or src.filename)
        mapping = self.mappings.get(key)
        if mapping is not None:
            info = (mapping, mapping.memory_start - src.memory_start)
        else:
            mapping = replace(src, id=len(self.out.mappings) + 1)
            self.mappings[key] = mapping
            self.out.mappings.append(mapping)
            info = (mapping, 0)
        self.mappings_by_id[src.id] = info
        return info


def _with_samples(profile: Profile, samples: List[Sample]) -> Profile:
    """A copy of ``profile`` (header and tables) with these samples."""
    return Profile(
        sample_types=list(profile.sample_types),
        samples=samples,
        mappings=list(profile.mappings),
        locations=[replace(loc, lines=list(loc.lines)) for loc in profile.locations],
        functions=list(profile.functions),
        drop_frames=profile.drop_frames,
        keep_frames=profile.keep_frames,
        time_nanos=profile.time_nanos,
        duration_nanos=profile.duration_nanos,
        period_type=profile.period_type,
        period=profile.period,
        comments=list(profile.comments),
        default_sample_type=profile.default_sample_type,
        doc_url=profile.doc_url,
    )


def _drop_unused(profile: Profile) -> Profile:
    """``profile`` without the locations, functions and mappings no sample
    uses (in place; ids unchanged)."""
    used_locations = {i for sample in profile.samples for i in sample.location_ids}
    profile.locations = [loc for loc in profile.locations if loc.id in used_locations]
    used_functions = {ln.function_id for loc in profile.locations for ln in loc.lines}
    used_mappings = {loc.mapping_id for loc in profile.locations}
    profile.functions = [f for f in profile.functions if f.id in used_functions]
    # The first mapping stays: pprof takes it for the main binary.
    profile.mappings = [
        m for i, m in enumerate(profile.mappings) if i == 0 or m.id in used_mappings
    ]
    profile.validate()
    return profile
