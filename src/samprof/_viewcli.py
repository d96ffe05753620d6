"""The commands that read profiles: ``top``, ``collapsed``, ``speedscope``,
``diff`` and ``merge`` (see samprof.cli). They need only the profiles, not
samprof's compiled core.

Every command takes pprof files (gzipped or not), directories of them
(every file in it, merged), and, where it makes sense, cProfile's pstats
files. Whatever is wrong with a file is one line on stderr naming it, and
exit status 1; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import marshal
import os
import re
import struct
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from samprof import pprof

# A pstats file (cProfile's, marshal'ed) as the report module takes it.
Pstats = Dict[Tuple[str, int, str], Tuple[Any, ...]]


class CannotLoad(Exception):
    """A profile that cannot be read or used; the message says which and
    why."""


def add_parsers(commands: Any, positive_int: Callable[[str], int]) -> None:
    """The reading commands, on samprof's subparsers."""

    def files(parser: argparse.ArgumentParser, pstats: bool = False) -> None:
        parser.add_argument(
            "files",
            metavar="FILE",
            nargs="+",
            help="pprof profiles (gzipped or not)"
            + (" or cProfile ones (pstats, .prof)" if pstats else "")
            + ", or directories of them; several are merged",
        )

    def sample_type(
        parser: argparse.ArgumentParser,
        what: str = "sample type, e.g. cpu, samples, inuse_space or alloc_space (default: "
        "the profile's default), as go tool pprof -sample_index",
    ) -> None:
        parser.add_argument(
            "-i", "--sample-index", "--sample-type", dest="sample_type", metavar="TYPE", help=what
        )

    def kind(parser: argparse.ArgumentParser) -> None:
        sample_type(
            parser,
            "where the files are of several kinds (a continuous agent's directory), "
            "read those with this sample type, e.g. cpu or inuse_space",
        )

    def selection(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--tag",
            metavar="KEY=VALUE",
            action="append",
            help="only the samples labelled KEY=VALUE, e.g. route=/users/{id} (may repeat: "
            "every key must match, one of a key's values), like go tool pprof -tagfocus",
        )
        parser.add_argument(
            "--focus",
            metavar="REGEX",
            help="only the samples whose stack holds a function matching REGEX, like "
            "go tool pprof -focus",
        )

    def lines(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--lines",
            action="store_true",
            help="each line of a function apart (function file:line), like go tool pprof -lines",
        )

    def output(parser: argparse.ArgumentParser, what: str) -> None:
        parser.add_argument(
            "-o", "--output", metavar="FILE", help=f"write {what} to FILE (default stdout)"
        )

    top = commands.add_parser(
        "top",
        help="show the functions that used the most",
        description="Print the top functions of a profile, like go tool pprof -top.",
    )
    files(top, pstats=True)
    top.add_argument(
        "-n", type=positive_int, default=20, help="how many functions to show (default 20)"
    )
    sample_type(top)
    top.add_argument(
        "--cum", action="store_true", help="sort by cumulative value, like go tool pprof -cum"
    )
    selection(top)
    lines(top)
    peek = top.add_mutually_exclusive_group()
    peek.add_argument(
        "--callers",
        metavar="FUNC",
        help="who calls FUNC (a function name) instead of the top list: each caller "
        "with the value (pprof) or the calls and time (cProfile) it brings",
    )
    peek.add_argument(
        "--callees",
        metavar="FUNC",
        help="what FUNC calls instead of the top list: each callee with the value it "
        "takes, (self) for FUNC's own",
    )
    top.add_argument(
        "--diff-base",
        metavar="FILE",
        action="append",
        help="show the change from this profile (or directory of them; may repeat), "
        "as go tool pprof -diff_base does",
    )

    folded = commands.add_parser(
        "collapsed",
        help="print folded stacks (flamegraph.pl, inferno)",
        description="Print a profile as folded stacks: one line per distinct stack, "
        "frames from the root joined by ';', then its value (Brendan Gregg's format, "
        "which flamegraph.pl, inferno and speedscope read).",
    )
    files(folded)
    sample_type(folded)
    selection(folded)
    lines(folded)
    output(folded, "the stacks")

    scope = commands.add_parser(
        "speedscope",
        help="write speedscope's JSON file format",
        description="Write a profile in speedscope's file format "
        "(https://www.speedscope.app opens it, offline too).",
    )
    files(scope)
    sample_type(scope)
    selection(scope)
    lines(scope)
    scope.add_argument(
        "--by",
        metavar="thread|LABEL",
        help="one profile per thread, or per value of a label (e.g. route)",
    )
    output(scope, "the JSON")

    flame = commands.add_parser(
        "flame",
        help="write a flame graph page (one HTML file)",
        description="Write an interactive flame graph of a profile as one self-contained "
        "HTML file (no network access; it opens from disk): hover for figures, click to "
        "zoom, search, icicle view, sample-type and label pickers.",
    )
    files(flame)
    selection(flame)
    kind(flame)
    flame.add_argument("--title", help="the page's title (default: the files' names)")
    flame.add_argument(
        "-o", "--output", metavar="FILE", required=True, help="the page, e.g. flame.html"
    )

    diff = commands.add_parser(
        "diff",
        help="show what grew and shrank between two profiles",
        description="Compare two profiles by function: each one's value in both, the "
        "change, and the change of its cumulative value, the largest first "
        "(go tool pprof -top -diff_base BASE NEW shows the same changes).",
    )
    diff.add_argument("base", metavar="BASE", help="the profile (or directory) before")
    diff.add_argument("new", metavar="NEW", help="the profile (or directory) after")
    diff.add_argument(
        "-n", type=positive_int, default=20, help="how many functions to show (default 20)"
    )
    sample_type(diff)
    selection(diff)
    lines(diff)
    diff.add_argument(
        "--html",
        metavar="FILE",
        help="also write a differential flame graph page to FILE: the new profile's "
        "frames, red where they grew, blue where they shrank",
    )
    diff.add_argument(
        "--normalize",
        action="store_true",
        help="scale the base to the new profile's total first, like go tool pprof -normalize",
    )

    merge = commands.add_parser(
        "merge",
        help="merge profiles into one",
        description="Merge profiles into one file, values summed, as go tool pprof "
        "merges them: pprof profiles of the same sample types into a pprof file, or "
        "cProfile ones into a pstats file.",
    )
    files(merge, pstats=True)
    kind(merge)
    merge.add_argument("-o", "--output", metavar="FILE", required=True, help="the merged file")


COMMANDS = ("top", "collapsed", "speedscope", "flame", "diff", "merge")


def run(opts: argparse.Namespace) -> int:
    """Run a reading command; returns the exit status."""
    handler = {
        "top": _top,
        "collapsed": _collapsed,
        "speedscope": _speedscope,
        "flame": _flame,
        "diff": _diff,
        "merge": _merge,
    }[opts.command]
    try:
        return handler(opts)
    except CannotLoad as e:
        return error(str(e))


def error(message: str) -> int:
    # One line, whatever a damaged file put in the names it quotes.
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)
    print(f"samprof: error: {text}", file=sys.stderr)
    return 1


# -- reading -------------------------------------------------------------------


def profile_files(paths: Sequence[str]) -> List[str]:
    """The files named, with each directory replaced by the files in it
    (sorted; hidden ones and subdirectories skipped)."""
    files = []
    for path in paths:
        if not os.path.isdir(path):
            files.append(path)
            continue
        try:
            names = sorted(os.listdir(path))
        except OSError as e:
            raise CannotLoad(f"cannot read {path}: {e.strerror or e}") from None
        found = [
            os.path.join(path, name)
            for name in names
            if not name.startswith(".") and os.path.isfile(os.path.join(path, name))
        ]
        if not found:
            raise CannotLoad(f"no profiles in directory {path}")
        files.extend(found)
    return files


def _is_number(x: Any) -> bool:
    # Counts and seconds; a damaged file can hold infinities or 1e300.
    return isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < 1e15


def _pstats_entry(key: Any, value: Any) -> bool:
    """Whether a key and value have the shape pstats gives them."""
    if not (
        isinstance(key, tuple)
        and len(key) == 3
        and isinstance(key[0], str)
        and isinstance(key[1], int)
        and isinstance(key[2], str)
    ):
        return False
    if not (isinstance(value, tuple) and len(value) == 5 and isinstance(value[4], dict)):
        return False
    if not all(_is_number(x) for x in value[:4]):
        return False
    return all(
        isinstance(k, tuple)
        and len(k) == 3
        and isinstance(v, tuple)
        and len(v) == 4
        and all(_is_number(x) for x in v)
        for k, v in value[4].items()
    )


def read_pstats(data: bytes) -> Optional[Pstats]:
    """The data of a pstats file (cProfile's, marshal'ed), or None if it is
    not one."""
    if data[:1] not in (b"{", b"\xfb"):  # a marshal'ed dict (0x80: referenced)
        return None
    try:
        value = _Unmarshal(data).value()
    except _NotPstats:
        return None
    if isinstance(value, dict) and all(_pstats_entry(k, v) for k, v in value.items()):
        return value
    return None


class _NotPstats(Exception):
    pass


class _Unmarshal:
    """The part of the marshal format that pstats files use (dicts, tuples,
    strings, ints, floats, references), read with every length checked
    against the data: ``marshal.loads`` trusts its input, and a damaged
    file can make it allocate gigabytes or run for seconds."""

    _MAX_DEPTH = 8

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.refs: List[Any] = []

    def value(self) -> Any:
        out = self._object(0)
        if self.pos != len(self.data):
            raise _NotPstats("trailing data")
        return out

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _NotPstats("truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def _int32(self) -> int:
        return int.from_bytes(self._take(4), "little", signed=True)

    def _count(self, size: int) -> int:
        n = self._int32() if size == 4 else self._take(1)[0]
        if n < 0 or n > len(self.data) - self.pos:  # every item takes a byte at least
            raise _NotPstats("bad length")
        return n

    def _object(self, depth: int) -> Any:
        if depth > self._MAX_DEPTH:
            raise _NotPstats("too deep")
        code = self._take(1)[0]
        ref, code = code & 0x80, chr(code & 0x7F)
        slot = -1
        if ref:
            slot = len(self.refs)
            self.refs.append(_NotPstats)  # reserved until made
        value: Any
        if code in "iN":
            value = self._int32() if code == "i" else None
        elif code == "l":
            n = self._int32()
            if abs(n) > 64:
                raise _NotPstats("long too large")
            digits = self._take(2 * abs(n))
            value = sum(
                int.from_bytes(digits[2 * i : 2 * i + 2], "little") << (15 * i)
                for i in range(abs(n))
            )
            value = -value if n < 0 else value
        elif code == "g":
            value = struct.unpack("<d", self._take(8))[0]
        elif code in "uatA":
            value = self._text(self._count(4))
        elif code in "zZ":
            value = self._text(self._count(1))
        elif code in "()":
            n = self._count(4 if code == "(" else 1)
            value = tuple(self._object(depth + 1) for _ in range(n))
        elif code == "{":
            value = {}
            while self.data[self.pos : self.pos + 1] != b"0":
                key = self._object(depth + 1)
                try:
                    value[key] = self._object(depth + 1)
                except TypeError:  # an unhashable key
                    raise _NotPstats("bad key") from None
            self.pos += 1
        elif code == "r":
            index = self._int32()
            if not 0 <= index < len(self.refs) or self.refs[index] is _NotPstats:
                raise _NotPstats("bad reference")
            return self.refs[index]
        else:
            raise _NotPstats(f"type {code!r}")
        if ref:
            self.refs[slot] = value
        return value

    def _text(self, n: int) -> str:
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise _NotPstats("bad text") from None


def _read_pprof(path: str, data: bytes, pstats_too: bool) -> pprof.Profile:
    try:
        return pprof.read(data)
    except pprof.PprofError as e:
        nor = " (nor a cProfile one)" if pstats_too else ""
        raise CannotLoad(f"{path} is not a valid pprof profile{nor}: {e}") from None


def load_any(
    paths: Sequence[str], pstats_too: bool = True, sample_type: Optional[str] = None
) -> Tuple[Optional[pprof.Profile], Optional[Pstats]]:
    """The profiles at ``paths`` (files or directories): the pprof ones
    merged, and the pstats (cProfile) ones added up; either may be None.
    Profiles of several kinds (a continuous agent's directory holds CPU
    and heap ones) are not merged: those with ``sample_type`` are taken,
    or the error says which kinds there are."""
    from samprof.report import merge_pstats

    profiles = []
    stats = []
    files = profile_files(paths)
    for path in files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise CannotLoad(f"cannot read {path}: {e.strerror or e}") from None
        parsed = read_pstats(data) if pstats_too else None
        if parsed is not None:
            stats.append(parsed)
            continue
        profiles.append((path, _read_pprof(path, data, pstats_too)))
    profiles = _of_one_kind(profiles, sample_type)
    merged = None
    if len(profiles) == 1:
        merged = profiles[0][1]
    elif profiles:
        try:
            merged = pprof.merge([p for _, p in profiles])
        except ValueError as e:
            # The message numbers the profiles; name the files instead.
            names = ", ".join(path for path, _ in profiles)
            raise CannotLoad(f"cannot merge {names}: {e}") from None
    return merged, (merge_pstats(stats) if stats else None)


def _of_one_kind(
    profiles: List[Tuple[str, pprof.Profile]], sample_type: Optional[str]
) -> List[Tuple[str, pprof.Profile]]:
    """The profiles of one set of sample types: all of them if they
    share one, else those that have sample_type."""
    kinds: Dict[Tuple[str, ...], List[Tuple[str, pprof.Profile]]] = {}
    for path, profile in profiles:
        kinds.setdefault(tuple(t.type for t in profile.sample_types), []).append((path, profile))
    if len(kinds) <= 1:
        return profiles
    chosen = [group for types, group in kinds.items() if sample_type in types]
    if len(chosen) == 1:
        return chosen[0]
    listed = "; ".join(
        f"{'/'.join(types)} ({len(group)} file{'s' if len(group) > 1 else ''})"
        for types, group in kinds.items()
    )
    example = next(iter(kinds))[-1]
    raise CannotLoad(
        f"the profiles are of several kinds: {listed}; pick one with -i TYPE (e.g. -i {example})"
    )


def _load_pprof(paths: Sequence[str], opts: argparse.Namespace) -> pprof.Profile:
    """The pprof profiles at paths, merged, of the kind -i names."""
    profile = load_any(paths, pstats_too=False, sample_type=opts.sample_type)[0]
    assert profile is not None  # profile_files found files; pstats are not read
    return profile


def load(paths: Sequence[str], sample_type: Optional[str] = None) -> pprof.Profile:
    """The pprof profiles at ``paths`` (files or directories), merged."""
    profile, stats = load_any(paths, sample_type=sample_type)
    if profile is None:
        raise CannotLoad(f"no pprof profiles in {', '.join(paths)} (only cProfile ones)")
    return profile


def _tags(specs: Sequence[str]) -> Dict[str, List[str]]:
    """--tag KEY=VALUE options as pprof.filter's labels."""
    wanted: Dict[str, List[str]] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key:
            raise CannotLoad(f"--tag takes KEY=VALUE, got {spec!r}")
        wanted.setdefault(key, []).append(value)
    return wanted


def _select(profile: pprof.Profile, opts: argparse.Namespace) -> pprof.Profile:
    """The samples --tag and --focus keep."""
    from samprof.views import focus

    if opts.tag:
        profile = pprof.filter(profile, _tags(opts.tag))
    if opts.focus:
        try:
            profile = focus(profile, opts.focus)
        except re.error as e:
            raise CannotLoad(f"--focus: invalid regular expression {opts.focus!r}: {e}") from None
    return profile


def _pprof_only(stats: Optional[Pstats], opts: argparse.Namespace) -> None:
    if stats is None:
        return
    for option, given in (
        ("--diff-base", getattr(opts, "diff_base", None)),
        ("--tag", opts.tag),
        ("--focus", opts.focus),
        ("-i", opts.sample_type),
        ("--cum", getattr(opts, "cum", False)),
        ("--lines", opts.lines),
        ("--callees", getattr(opts, "callees", None)),
    ):
        if given:
            raise CannotLoad(f"{option} applies to pprof profiles, not cProfile ones")


# -- writing -------------------------------------------------------------------


def _emit(text: str) -> int:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `samprof top FILE | head`: the reader left; say nothing more, and
        # keep python from complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    return 0


def _write(path: Optional[str], data: bytes) -> int:
    """``data`` to ``path`` (whole: a temporary name, then a rename), or to
    stdout when there is none."""
    if path is None or path == "-":
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        except BrokenPipeError:
            return 1
        return 0
    partial = f"{path}.tmp{os.getpid()}"
    try:
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, path)
    except OSError as e:
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise CannotLoad(f"cannot write {path}: {e.strerror or e}") from None
    return 0


# -- commands ------------------------------------------------------------------


def _top(opts: argparse.Namespace) -> int:
    from samprof.report import callees, callers, pstats_callers, pstats_top, top

    profile, stats = load_any(opts.files, sample_type=opts.sample_type)
    _pprof_only(stats if profile is None else None, opts)
    if profile is not None and opts.diff_base:
        base = load(opts.diff_base, opts.sample_type)
        try:
            profile = pprof.diff(profile, base)
        except ValueError as e:
            raise CannotLoad(f"cannot compare with the base: {e}") from None
    whole = profile
    if profile is not None:
        profile = _select(profile, opts)
    filters = [f"tagfocus={tag}" for tag in opts.tag or ()]
    if opts.focus:
        filters.append(f"focus={opts.focus}")
    parts = []
    try:
        if profile is not None:
            if opts.callers:
                parts.append(callers(profile, opts.callers, opts.sample_type))
            elif opts.callees:
                parts.append(callees(profile, opts.callees, opts.sample_type))
            else:
                parts.append(
                    top(
                        profile,
                        n=opts.n,
                        sample_type=opts.sample_type,
                        cum=opts.cum,
                        lines=opts.lines,
                        of=whole if filters else None,
                        filters=filters,
                    )
                )
        if stats is not None:
            if opts.callers:
                parts.append(pstats_callers(stats, opts.callers))
            elif opts.callees:
                raise CannotLoad("--callees applies to pprof profiles, not cProfile ones")
            else:
                parts.append(pstats_top(stats, n=opts.n))
    except ValueError as e:
        raise CannotLoad(str(e)) from None
    return _emit("\n".join(parts))


def _collapsed(opts: argparse.Namespace) -> int:
    from samprof.views import collapsed

    profile = _select(_load_pprof(opts.files, opts), opts)
    try:
        text = collapsed(profile, opts.sample_type, lines=opts.lines)
    except ValueError as e:
        raise CannotLoad(str(e)) from None
    if opts.output is None:
        return _emit(text)
    return _write(opts.output, text.encode())


def _speedscope(opts: argparse.Namespace) -> int:
    from samprof.views import speedscope

    profile = _select(_load_pprof(opts.files, opts), opts)
    name = os.path.basename(os.path.normpath(opts.files[0])) if len(opts.files) == 1 else "merged"
    try:
        doc = speedscope(profile, opts.sample_type, group_by=opts.by, name=name, lines=opts.lines)
    except ValueError as e:
        raise CannotLoad(str(e)) from None
    return _write(opts.output, json.dumps(doc, separators=(",", ":")).encode())


def _flame(opts: argparse.Namespace) -> int:
    from samprof.views import flame_html

    profile = _select(_load_pprof(opts.files, opts), opts)
    title = opts.title or ", ".join(os.path.basename(os.path.normpath(f)) for f in opts.files)
    return _write(opts.output, flame_html(profile, title).encode())


def _diff(opts: argparse.Namespace) -> int:
    from samprof.views import diff_table, flame_html

    base = _select(_load_pprof([opts.base], opts), opts)
    new = _select(_load_pprof([opts.new], opts), opts)
    try:
        text = diff_table(
            base, new, opts.sample_type, n=opts.n, normalize=opts.normalize, lines=opts.lines
        )
    except ValueError as e:
        raise CannotLoad(str(e)) from None
    if opts.html:
        if opts.normalize:
            factor = _total(base, opts.sample_type) / (_total(new, opts.sample_type) or 1)
            new = pprof.scale(new, factor)
        title = f"{os.path.basename(opts.new)} against {os.path.basename(opts.base)}"
        _write(opts.html, flame_html(new, title, base=base).encode())
    return _emit(text)


def _total(profile: pprof.Profile, sample_type: Optional[str]) -> int:
    from samprof.report import _select_sample_index

    index = _select_sample_index(profile, sample_type)
    return sum(sample.values[index] for sample in profile.samples)


def _merge(opts: argparse.Namespace) -> int:
    profile, stats = load_any(opts.files, sample_type=opts.sample_type)
    if profile is not None and stats is not None:
        raise CannotLoad(
            "cannot merge pprof profiles with cProfile ones: they count different things"
        )
    if profile is not None:
        return _write(opts.output, pprof.write(profile))
    return _write(opts.output, marshal.dumps(stats))
