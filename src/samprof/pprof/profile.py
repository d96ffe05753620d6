"""The pprof data model: a profile as plain dataclasses, every string-table
index resolved.

Field names follow google/pprof's ``proto/profile.proto`` (docs/design.md
§7); repeated fields are plural. A profile comes from
:func:`samprof.pprof.read` (or :meth:`Profile.parse`), or is built in Python
and written with :func:`samprof.pprof.write`::

    from samprof.pprof import Frame, Profile, ValueType, write

    profile = Profile(
        sample_types=[ValueType("samples", "count"), ValueType("cpu", "nanoseconds")],
        period_type=ValueType("cpu", "nanoseconds"),
        period=10_000_000,
    )
    profile.add_sample(
        [Frame("leaf", "app.py", 12), Frame("main", "app.py", 30)],  # leaf first
        [1, 10_000_000],
        labels={"route": "/users", "bytes": 512},
    )
    data = write(profile)  # gzipped pprof, for go tool pprof
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union
from typing import Mapping as Dictlike

__all__ = [
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
]


class PprofError(ValueError):
    """The data is not a well-formed pprof profile (bad gzip, truncated or
    corrupt protobuf, or references that do not resolve), or a profile
    cannot be written as one."""


# --------------------------------------------------------------------------
# Data model. Field names follow profile.proto; repeated fields are plural.


@dataclass(frozen=True)
class ValueType:
    """The type and unit of one sample value, e.g. ``cpu``/``nanoseconds``."""

    type: str
    unit: str

    def __str__(self) -> str:
        return f"{self.type}/{self.unit}"


@dataclass(frozen=True)
class Label:
    """A sample label: a string label when ``str_value`` is non-empty,
    otherwise a numeric one (``num``, in ``num_unit`` if given)."""

    key: str
    str_value: str = ""
    num: int = 0
    num_unit: str = ""

    @property
    def value(self) -> Union[str, int]:
        """The label's value: ``str_value`` for a string label, else ``num``."""
        return self.str_value if self.str_value else self.num


@dataclass
class Sample:
    """One stack with its values; ``location_ids`` are leaf first."""

    location_ids: List[int] = field(default_factory=list)
    values: List[int] = field(default_factory=list)
    labels: List[Label] = field(default_factory=list)


@dataclass(frozen=True)
class Mapping:
    """A binary or other address range the locations belong to."""

    id: int
    memory_start: int = 0
    memory_limit: int = 0
    file_offset: int = 0
    filename: str = ""
    build_id: str = ""
    has_functions: bool = False
    has_filenames: bool = False
    has_line_numbers: bool = False
    has_inline_frames: bool = False


@dataclass(frozen=True)
class Line:
    """A source line inside a function; ``function_id`` 0 means unknown."""

    function_id: int
    line: int = 0
    column: int = 0


@dataclass
class Location:
    """A program location. Its ``lines`` run from the innermost inlined
    function (first) to the caller that contains them (last)."""

    id: int
    mapping_id: int = 0
    address: int = 0
    lines: List[Line] = field(default_factory=list)
    is_folded: bool = False


@dataclass(frozen=True)
class Function:
    """A function: for Python code, ``name`` is the qualified name
    (``Class.method``), ``filename`` the source file. Pseudo-frames such as
    ``<native thread>`` have an empty filename."""

    id: int
    name: str = ""
    system_name: str = ""
    filename: str = ""
    start_line: int = 0


class Frame(NamedTuple):
    """One frame of a resolved stack, as returned by :meth:`Profile.stack_of`."""

    function: str
    filename: str
    line: int


@dataclass
class Profile:
    """A pprof profile.

    Read one with :func:`samprof.pprof.read` (or :meth:`parse`), or build
    one: set the header fields, then add samples with :meth:`add_sample`
    (which makes the functions and locations) or fill the lists directly.
    Lookups by id (:meth:`function`, :meth:`location`, :meth:`mapping`) use
    indexes made when the profile is created and by :meth:`add_sample`; after
    editing the lists by hand, call :meth:`validate`, which rebuilds them.

    Two profiles are equal when their contents are: ``string_table`` (the
    table as read from a file, kept for inspection) is not compared, as the
    writer builds its own.
    """

    sample_types: List[ValueType] = field(default_factory=list)
    samples: List[Sample] = field(default_factory=list)
    mappings: List[Mapping] = field(default_factory=list)
    locations: List[Location] = field(default_factory=list)
    functions: List[Function] = field(default_factory=list)
    string_table: List[str] = field(default_factory=lambda: [""], compare=False)
    drop_frames: str = ""
    keep_frames: str = ""
    time_nanos: int = 0
    duration_nanos: int = 0
    period_type: ValueType = field(default_factory=lambda: ValueType("", ""))
    period: int = 0
    comments: List[str] = field(default_factory=list)
    default_sample_type: str = ""
    doc_url: str = ""

    _mappings_by_id: Dict[int, Mapping] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _locations_by_id: Dict[int, Location] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _functions_by_id: Dict[int, Function] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # add_sample's tables, made on its first call after the indexes were
    # (None until then, so that reading a profile does not pay for them):
    # (name, filename) -> function id, (function id, line) -> location id.
    _function_keys: Optional[Dict[Tuple[str, str], int]] = field(
        default=None, init=False, repr=False, compare=False
    )
    _location_keys: Optional[Dict[Tuple[int, int], int]] = field(
        default=None, init=False, repr=False, compare=False
    )
    _next_function_id: int = field(default=1, init=False, repr=False, compare=False)
    _next_location_id: int = field(default=1, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index()

    @classmethod
    def parse(cls, data: Union[bytes, bytearray, memoryview]) -> Profile:
        """Decode a profile from gzipped or raw pprof bytes; the same as
        :func:`samprof.pprof.read`.

        Raises PprofError if the bytes are not a well-formed profile, and
        TypeError if ``data`` is not bytes-like.
        """
        from samprof.pprof.decode import read

        return read(data)

    def add_sample(
        self,
        stack: Sequence[Union[Frame, Tuple[str, str, int]]],
        values: Sequence[int],
        labels: Union[Dictlike[str, Union[str, int]], Sequence[Label], None] = None,
    ) -> Sample:
        """Add a sample and return it.

        ``stack`` is leaf first, each frame a :class:`Frame` (or a
        ``(function, filename, line)`` tuple); a function is made once per
        (name, filename) and a location once per (function, line), each
        with the next free id. ``values`` has one value per sample type.
        ``labels`` is a dict (a ``str`` value makes a string label, an
        ``int`` a numeric one) or a list of :class:`Label` (for numeric
        labels with units, or a key that repeats).

        Raises ValueError if the number of values does not match the
        sample types or a label value is neither str nor int.
        """
        if len(values) != len(self.sample_types):
            raise ValueError(
                f"{len(values)} values for {len(self.sample_types)} sample types "
                f"({', '.join(map(str, self.sample_types)) or 'none'})"
            )
        stale_functions = len(self._functions_by_id) != len(self.functions)
        if stale_functions or len(self._locations_by_id) != len(self.locations):
            # The lists were edited by hand since the indexes were made.
            self._index()
        if self._function_keys is None:
            self._make_add_sample_keys()
        made_labels = _labels_from(labels)
        location_ids = [self._location_for(Frame(*frame)) for frame in stack]
        sample = Sample(location_ids, [int(v) for v in values], made_labels)
        self.samples.append(sample)
        return sample

    def _location_for(self, frame: Frame) -> int:
        assert self._function_keys is not None and self._location_keys is not None
        function_key = (frame.function, frame.filename)
        function_id = self._function_keys.get(function_key)
        if function_id is None:
            function_id = self._next_function_id
            self._next_function_id += 1
            function = Function(function_id, name=frame.function, filename=frame.filename)
            self.functions.append(function)
            self._functions_by_id[function_id] = function
            self._function_keys[function_key] = function_id
        location_key = (function_id, frame.line)
        location_id = self._location_keys.get(location_key)
        if location_id is None:
            location_id = self._next_location_id
            self._next_location_id += 1
            location = Location(location_id, lines=[Line(function_id, frame.line)])
            self.locations.append(location)
            self._locations_by_id[location_id] = location
            self._location_keys[location_key] = location_id
        return location_id

    def validate(self) -> None:
        """Check that every id is non-zero and unique, every reference
        resolves and every sample has one value per sample type.

        Raises PprofError naming the first problem found.
        """
        self._index()
        if not self.string_table or self.string_table[0] != "":
            raise PprofError("string_table[0] must be the empty string")
        _check_ids(self.mappings, "mapping")
        _check_ids(self.functions, "function")
        _check_ids(self.locations, "location")
        for location in self.locations:
            if location.mapping_id and location.mapping_id not in self._mappings_by_id:
                raise PprofError(
                    f"location {location.id} refers to unknown mapping id {location.mapping_id}"
                )
            for line in location.lines:
                if line.function_id and line.function_id not in self._functions_by_id:
                    raise PprofError(
                        f"location {location.id} refers to unknown function id {line.function_id}"
                    )
        n_types = len(self.sample_types)
        for i, sample in enumerate(self.samples):
            if len(sample.values) != n_types:
                raise PprofError(
                    f"sample {i} has {len(sample.values)} values but the profile has "
                    f"{n_types} sample types"
                )
            for location_id in sample.location_ids:
                if location_id not in self._locations_by_id:
                    raise PprofError(f"sample {i} refers to unknown location id {location_id}")

    def sample_type_index(self, type_name: str) -> int:
        """Index into ``Sample.values`` of the sample type named ``type_name``
        (e.g. ``"cpu"``); ``"type/unit"`` is accepted too.

        Raises ValueError, listing the available types, if there is none.
        """
        for i, value_type in enumerate(self.sample_types):
            if type_name in (value_type.type, str(value_type)):
                return i
        available = ", ".join(vt.type for vt in self.sample_types) or "none"
        raise ValueError(f"no sample type {type_name!r} in profile (available: {available})")

    def default_sample_index(self) -> int:
        """The sample type pprof shows by default: ``default_sample_type`` if
        set and present, otherwise the last one.

        Raises ValueError if the profile has no sample types.
        """
        if not self.sample_types:
            raise ValueError("profile has no sample types")
        if self.default_sample_type:
            for i, value_type in enumerate(self.sample_types):
                if value_type.type == self.default_sample_type:
                    return i
        return len(self.sample_types) - 1

    def mapping(self, mapping_id: int) -> Mapping:
        """The mapping with this id; KeyError if there is none."""
        return self._mappings_by_id[mapping_id]

    def location(self, location_id: int) -> Location:
        """The location with this id; KeyError if there is none."""
        return self._locations_by_id[location_id]

    def function(self, function_id: int) -> Function:
        """The function with this id; KeyError if there is none."""
        return self._functions_by_id[function_id]

    def stack_of(self, sample: Sample) -> List[Frame]:
        """The sample's stack as frames, leaf first.

        A location with inlined lines gives one frame per line, innermost
        first. A location without lines (an unsymbolized address) gives a
        frame named by its hex address, as pprof shows it.
        """
        frames: List[Frame] = []
        for location_id in sample.location_ids:
            location = self._locations_by_id[location_id]
            if not location.lines:
                frames.append(Frame(f"0x{location.address:x}", "", 0))
                continue
            for line in location.lines:
                function = self._functions_by_id.get(line.function_id)
                if function is None:
                    frames.append(Frame(f"0x{location.address:x}", "", line.line))
                else:
                    frames.append(Frame(function.name, function.filename, line.line))
        return frames

    def inlined_of(self, sample: Sample) -> List[bool]:
        """For each frame :meth:`stack_of` gives, whether it was inlined into
        its caller: true for every line of a location but the last."""
        inlined: List[bool] = []
        for location_id in sample.location_ids:
            lines = len(self._locations_by_id[location_id].lines)
            inlined.extend(i < lines - 1 for i in range(max(lines, 1)))
        return inlined

    def labels_of(self, sample: Sample) -> Dict[str, Union[str, int]]:
        """The sample's labels as a dict: strings for string labels, ints for
        numeric ones. If a key repeats, the first value is kept (all of them
        are in ``sample.labels``)."""
        labels: Dict[str, Union[str, int]] = {}
        for label in sample.labels:
            labels.setdefault(label.key, label.value)
        return labels

    def _index(self) -> None:
        self._mappings_by_id = {m.id: m for m in self.mappings}
        self._locations_by_id = {loc.id: loc for loc in self.locations}
        self._functions_by_id = {f.id: f for f in self.functions}
        self._function_keys = self._location_keys = None

    def _make_add_sample_keys(self) -> None:
        """add_sample's tables, from the functions and locations there are
        (the first of several equal keys wins), and the next free ids."""
        self._next_function_id = max(self._functions_by_id, default=0) + 1
        self._next_location_id = max(self._locations_by_id, default=0) + 1
        self._function_keys = {}
        for f in self.functions:
            self._function_keys.setdefault((f.name, f.filename), f.id)
        self._location_keys = {}
        for loc in self.locations:
            if len(loc.lines) == 1 and not loc.address and not loc.is_folded:
                key = (loc.lines[0].function_id, loc.lines[0].line)
                self._location_keys.setdefault(key, loc.id)


def _labels_from(
    labels: Union[Dictlike[str, Union[str, int]], Sequence[Label], None],
) -> List[Label]:
    if labels is None:
        return []
    if not isinstance(labels, Dictlike):
        out = list(labels)
        for label in out:
            if not isinstance(label, Label):
                raise ValueError(f"labels must be Label objects or a dict, not {label!r}")
        return out
    made = []
    for key, value in labels.items():
        if isinstance(value, str):
            made.append(Label(key, str_value=value))
        elif isinstance(value, int) and not isinstance(value, bool):
            made.append(Label(key, num=value))
        else:
            raise ValueError(f"label {key!r}: value must be str or int, not {type(value).__name__}")
    return made


def _check_ids(items: List[Any], what: str) -> None:
    """Raise PprofError unless every item's id is non-zero and unique."""
    seen = set()
    for item in items:
        if item.id == 0:
            raise PprofError(f"{what} with id 0 (ids must be non-zero)")
        if item.id in seen:
            raise PprofError(f"duplicate {what} id {item.id}")
        seen.add(item.id)
