"""Profiles in the forms other tools read, and comparisons of two.

- :func:`collapsed`: Brendan Gregg's folded stacks (``a;b;c 42`` per line,
  root first), for ``flamegraph.pl``, inferno and speedscope's importer;
- :func:`speedscope`: speedscope's own JSON file format, one sampled
  profile per thread or label value if asked;
- :func:`diff_table`: what grew and shrank between two profiles, by
  function, as text;
- :func:`flame_html`: a flame graph page, one self-contained HTML file, of
  one profile or of the difference between two.

Like :mod:`samprof.pprof`, nothing here needs samprof's compiled core::

    from samprof import pprof, views

    profile = pprof.read(open("cpu.pb.gz", "rb").read())
    print(views.collapsed(profile), end="")
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple, Union

from samprof.pprof import DIFF_BASE_LABEL, Profile
from samprof.pprof.ops import _with_samples
from samprof.report import _select_sample_index, format_percent, format_value, frame_name

__all__ = ["collapsed", "diff_table", "flame_html", "focus", "speedscope"]

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"
# pprof units speedscope knows by name; any other is shown as a plain number.
_SPEEDSCOPE_UNITS = ("nanoseconds", "microseconds", "milliseconds", "seconds", "bytes")
# Labels that name a sample's thread (samprof's CPU and wall profiles).
_THREAD_LABELS = ("thread_name", "thread_id")


def _folded_name(name: str) -> str:
    # The folded format has no escapes: ';' separates frames and a line
    # ends a stack.
    return name.replace(";", ":").replace("\r", " ").replace("\n", " ")


def stacks(
    profile: Profile, sample_type: Union[str, int, None] = None, lines: bool = False
) -> Dict[Tuple[str, ...], int]:
    """Each distinct stack, root first, with the sum of its samples' values
    of one sample type (the default one if none is named); stacks whose sum
    is zero are left out."""
    index = _select_sample_index(profile, sample_type)
    out: Dict[Tuple[str, ...], int] = {}
    for sample in profile.samples:
        value = sample.values[index]
        if not value:
            continue
        names = tuple(
            frame_name(frame.function, frame.filename, frame.line, lines)
            for frame in reversed(profile.stack_of(sample))
        )
        out[names] = out.get(names, 0) + value
    return {names: value for names, value in out.items() if value}


def collapsed(
    profile: Profile, sample_type: Union[str, int, None] = None, lines: bool = False
) -> str:
    """Folded stacks: one line per distinct stack, its frames root first
    joined by ``;``, a space, and its value (the default sample type, or
    ``sample_type``). A ``;`` inside a name becomes ``:`` and a line break
    a space, as the format has no escapes. Lines are sorted, so equal
    profiles give equal text."""
    rows = sorted(
        (";".join(_folded_name(name) for name in names), value)
        for names, value in stacks(profile, sample_type, lines).items()
    )
    return "".join(f"{text} {value}\n" for text, value in rows)


def _thread_of(labels: Dict[str, Union[str, int]]) -> str:
    name, ident = labels.get("thread_name"), labels.get("thread_id")
    if name is not None and ident is not None:
        return f"{name} ({ident})"
    if name is None and ident is None:
        return "(no thread)"
    return str(name if name is not None else ident)


def speedscope(
    profile: Profile,
    sample_type: Union[str, int, None] = None,
    group_by: Optional[str] = None,
    name: str = "profile",
    lines: bool = False,
) -> Dict[str, Any]:
    """The profile in speedscope's file format (a dict for ``json.dump``):
    ``sampled`` profiles of one sample type, weights in its unit (time
    and bytes units as speedscope names them, anything else as ``none``).

    ``group_by`` makes one profile per value of a label (samples without it
    go to ``(none)``); ``"thread"`` groups by thread (samprof's
    ``thread_name`` and ``thread_id`` labels). Frames are functions (with
    ``lines``, function and line), each with its file and line.

    Raises ValueError for an unknown sample type, and for a profile with
    negative values (a diff), which speedscope cannot show.
    """
    index = _select_sample_index(profile, sample_type)
    value_type = profile.sample_types[index]
    unit = value_type.unit if value_type.unit in _SPEEDSCOPE_UNITS else "none"
    frames: List[Dict[str, Any]] = []
    frame_ids: Dict[Tuple[str, str, int], int] = {}
    groups: Dict[str, Tuple[List[List[int]], List[int]]] = {}
    for sample in profile.samples:
        value = sample.values[index]
        if value < 0:
            raise ValueError(
                "speedscope cannot show negative values: this profile is a difference "
                "of two (show each, or use samprof diff)"
            )
        if not value:
            continue
        stack = []
        for frame in reversed(profile.stack_of(sample)):
            key = (frame.function, frame.filename, frame.line if lines else 0)
            i = frame_ids.get(key)
            if i is None:
                i = frame_ids[key] = len(frames)
                entry: Dict[str, Any] = {"name": frame_name(*key, lines=lines)}
                if frame.filename:
                    entry["file"] = frame.filename
                if lines and frame.line:
                    entry["line"] = frame.line
                frames.append(entry)
            stack.append(i)
        if group_by is None:
            group = name
        elif group_by == "thread":
            group = _thread_of(profile.labels_of(sample))
        else:
            group = str(profile.labels_of(sample).get(group_by, "(none)"))
        samples, weights = groups.setdefault(group, ([], []))
        samples.append(stack)
        weights.append(value)
    if not lines:
        # A function's own first line, where the profile has it.
        by_name = {(f.name, f.filename): f.start_line for f in profile.functions}
        for entry in frames:
            start = by_name.get((entry["name"], entry.get("file", "")))
            if start:
                entry["line"] = start
    profiles = []
    for group in sorted(groups):
        samples, weights = groups[group]
        profiles.append(
            {
                "type": "sampled",
                "name": group if group_by is None else f"{group_by} {group}",
                "unit": unit,
                "startValue": 0,
                "endValue": sum(weights),
                "samples": samples,
                "weights": weights,
            }
        )
    from samprof import __version__

    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "shared": {"frames": frames},
        "profiles": profiles,
        "name": f"{name} ({value_type.type})",
        "activeProfileIndex": 0,
        "exporter": f"samprof {__version__}",
    }


def focus(profile: Profile, pattern: str) -> Profile:
    """The samples whose stack holds a function whose name matches the
    regular expression ``pattern`` anywhere in it (``go tool pprof
    -focus``). Raises re.error for an invalid expression."""
    rx = re.compile(pattern)
    hits: Dict[str, bool] = {}

    def matches(name: str) -> bool:
        hit = hits.get(name)
        if hit is None:
            hit = hits[name] = bool(rx.search(name))
        return hit

    kept = [
        sample
        for sample in profile.samples
        if any(matches(frame.function) for frame in profile.stack_of(sample))
    ]
    return _with_samples(profile, kept)


def _by_function(
    profile: Profile, index: int, lines: bool
) -> Tuple[Dict[str, int], Dict[str, int], int]:
    """Flat and cumulative value of each function, and the total."""
    flat: Dict[str, int] = {}
    cum: Dict[str, int] = {}
    total = 0
    for sample in profile.samples:
        value = sample.values[index]
        if not value:
            continue
        total += value
        names = [
            frame_name(frame.function, frame.filename, frame.line, lines)
            for frame in profile.stack_of(sample)
        ]
        if not names:
            continue
        flat[names[0]] = flat.get(names[0], 0) + value
        for name in set(names):
            cum[name] = cum.get(name, 0) + value
    return flat, cum, total


def diff_table(
    base: Profile,
    new: Profile,
    sample_type: Union[str, int, None] = None,
    n: int = 20,
    normalize: bool = False,
    lines: bool = False,
) -> str:
    """What changed from ``base`` to ``new``, by function: each one's flat
    value in both, the change (what ``go tool pprof -top -diff_base BASE
    NEW`` shows as flat), the change as a share of the base's total, and
    the change of its cumulative value; the ``n`` largest changes first.

    ``normalize`` first scales the new profile to the base's total
    (pprof's ``-normalize``), so that a longer or busier run does not make
    everything grow. Raises ValueError if the two have different sample
    types, or for an unknown sample type.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if [str(t) for t in base.sample_types] != [str(t) for t in new.sample_types]:
        raise ValueError(
            "the profiles have different sample types: "
            f"{', '.join(map(str, base.sample_types))} against "
            f"{', '.join(map(str, new.sample_types))}"
        )
    for profile, which in ((base, "base"), (new, "new")):
        if any(DIFF_BASE_LABEL in sample.labels for sample in profile.samples):
            raise ValueError(f"the {which} profile is already a difference")
    index = _select_sample_index(new, sample_type)
    unit = new.sample_types[index].unit
    base_flat, base_cum, base_total = _by_function(base, index, lines)
    new_flat, new_cum, new_total = _by_function(new, index, lines)
    factor = 1.0
    if normalize and new_total:
        factor = base_total / new_total
    names = set(base_cum) | set(new_cum) | set(base_flat) | set(new_flat)

    def scaled(value: int) -> int:
        return int(round(value * factor))

    rows = []
    for name in names:
        old_f, new_f = base_flat.get(name, 0), scaled(new_flat.get(name, 0))
        old_c, new_c = base_cum.get(name, 0), scaled(new_cum.get(name, 0))
        if old_f == new_f and old_c == new_c:
            continue
        rows.append((name, old_f, new_f, new_f - old_f, new_c - old_c))
    rows.sort(key=lambda r: (-abs(r[3]), -abs(r[4]), r[0]))

    def fmt(value: int) -> str:
        return format_value(value, unit)

    def signed(value: int) -> str:
        return ("+" if value > 0 else "") + fmt(value)

    change = scaled(new_total) - base_total
    lines_out = [
        f"Type: {new.sample_types[index].type}",
        f"Base: {fmt(base_total)}, new: {fmt(new_total)}"
        + (f" (normalized to {fmt(scaled(new_total))})" if normalize else "")
        + f", change: {signed(change)}"
        + (f" ({_signed_percent(change, base_total)})" if base_total else ""),
    ]
    if not rows:
        lines_out.append("No function changed.")
        return "\n".join(lines_out) + "\n"
    shown = rows[:n]
    if len(shown) < len(rows):
        lines_out.append(f"Showing the {len(shown)} largest changes out of {len(rows)}")
    lines_out.append(
        f"{'base':>10} {'new':>10} {'change':>10} {'of base':>8} {'cum change':>10}  function"
    )
    for name, old_f, new_f, delta, cum_delta in shown:
        lines_out.append(
            f"{fmt(old_f):>10} {fmt(new_f):>10} {signed(delta):>10} "
            f"{_signed_percent(delta, base_total):>8} {signed(cum_delta):>10}  {name}"
        )
    return "\n".join(lines_out) + "\n"


def _signed_percent(value: int, total: int) -> str:
    if not total:
        return ""
    text = format_percent(value, total).strip()
    return ("+" if value > 0 else "-" if value < 0 else "") + text


# A label key with more values than this is left out of the page's picker
# (ids, timestamps): the picker would be unusable and the page heavy.
_MAX_LABEL_VALUES = 200


def _flame_rows(
    profile: Profile,
    frame_ids: Dict[Tuple[str, str], int],
    frames: List[List[Any]],
    trie: Dict[Tuple[int, int], int],
    parents: List[int],
    node_frames: List[int],
    label_ids: Dict[str, int],
    set_ids: Dict[Tuple[int, ...], int],
) -> List[List[int]]:
    """The profile's samples as the page takes them: [node, label set id,
    value of each sample type], where node is the stack's last node in the
    call tree (``trie``: (parent node, frame) -> node, node 0 the root,
    each node after its parent), equal (node, labels) rows added up."""
    rows: Dict[Tuple[int, int], List[int]] = {}
    for sample in profile.samples:
        node = 0
        for frame in reversed(profile.stack_of(sample)):
            key = (frame.function, frame.filename)
            f = frame_ids.get(key)
            if f is None:
                f = frame_ids[key] = len(frames)
                frames.append([frame.function, frame.filename, frame.line])
            child = trie.get((node, f))
            if child is None:
                child = trie[(node, f)] = len(parents)
                parents.append(node)
                node_frames.append(f)
            node = child
        kvs = tuple(
            sorted(
                label_ids[f"{label.key}={label.value}"]
                for label in sample.labels
                if f"{label.key}={label.value}" in label_ids
            )
        )
        ls = set_ids.setdefault(kvs, len(set_ids))
        row = rows.get((node, ls))
        if row is None:
            rows[(node, ls)] = [node, ls, *sample.values]
        else:
            for k, value in enumerate(sample.values):
                row[2 + k] += value
    return list(rows.values())


def flame_html(profile: Profile, title: str = "profile", base: Optional[Profile] = None) -> str:
    """A flame graph page of ``profile``: one self-contained HTML file (no
    network access; it opens from disk), with hover details, click to
    zoom, search, an icicle view, a sample-type picker and a label filter.

    With ``base``, a differential flame graph: frames as wide as in
    ``profile``, red where they grew from ``base``, blue where they shrank.
    Raises ValueError if ``base`` has other sample types.
    """
    import html
    import json
    from importlib import resources

    if base is not None and [str(t) for t in base.sample_types] != [
        str(t) for t in profile.sample_types
    ]:
        raise ValueError("the profiles have different sample types")
    sources = [profile] + ([base] if base is not None else [])
    values: Dict[str, set] = {}
    for source in sources:
        for sample in source.samples:
            for label in sample.labels:
                if label.key != DIFF_BASE_LABEL.key:
                    values.setdefault(label.key, set()).add(label.value)
    label_values = sorted(
        f"{key}={value}"
        for key, vals in values.items()
        if len(vals) <= _MAX_LABEL_VALUES
        for value in vals
    )
    label_ids = {kv: i for i, kv in enumerate(label_values)}
    frame_ids: Dict[Tuple[str, str], int] = {}
    frames: List[List[Any]] = []
    trie: Dict[Tuple[int, int], int] = {}
    parents, node_frames = [-1], [-1]  # node 0: the root
    set_ids: Dict[Tuple[int, ...], int] = {}
    tables = (frame_ids, frames, trie, parents, node_frames, label_ids, set_ids)
    samples = _flame_rows(profile, *tables)
    base_samples = None
    if base is not None:
        base_samples = _flame_rows(base, *tables)
    data = {
        "title": title,
        "types": [[t.type, t.unit] for t in profile.sample_types],
        "defaultType": profile.default_sample_index() if profile.sample_types else 0,
        "frames": frames,
        "parents": parents,
        "nodeFrames": node_frames,
        "labelValues": label_values,
        "labelSets": [list(kvs) for kvs in set_ids],
        "samples": samples,
        "baseSamples": base_samples,
    }
    # Inside <script>, "</" would end the element early.
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    page = resources.files("samprof").joinpath("_flame.html").read_text(encoding="utf-8")
    head, rest = page.split("__TITLE__", 1)
    middle, tail = rest.split("__DATA__", 1)
    return head + html.escape(title) + middle + text + tail
