"""A small pprof reader in pure Python.

Reads the profiles samprof writes (and any other pprof profile, such as Go's)
into plain dataclasses, with every string-table index already resolved::

    from samprof.pprof import Profile

    with open("cpu.pb.gz", "rb") as f:
        profile = Profile.parse(f.read())
    cpu = profile.sample_type_index("cpu")
    for sample in profile.samples:
        leaf = profile.stack_of(sample)[0]
        print(sample.values[cpu], leaf.function, profile.labels_of(sample))

The message layout is google/pprof's ``proto/profile.proto`` (field numbers
in DESIGN.md section 7). The decoder handles the whole protobuf wire format
that profile.proto can produce: varints (including padded ones), length-
delimited fields, packed and unpacked repeated scalars, and it skips fields
it does not know. Anything truncated, corrupt or inconsistent raises
:class:`PprofError` with a message that says what was wrong and where.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Tuple, Union

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
    corrupt protobuf, or references that do not resolve)."""


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
    """A decoded pprof profile.

    Build one with :meth:`parse`. Lookups by id (:meth:`function`,
    :meth:`location`, :meth:`mapping`) use indexes made when the profile is
    created, so treat the lists as read-only afterwards (or call
    :meth:`validate`, which rebuilds them).
    """

    sample_types: List[ValueType] = field(default_factory=list)
    samples: List[Sample] = field(default_factory=list)
    mappings: List[Mapping] = field(default_factory=list)
    locations: List[Location] = field(default_factory=list)
    functions: List[Function] = field(default_factory=list)
    string_table: List[str] = field(default_factory=lambda: [""])
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

    def __post_init__(self) -> None:
        self._index()

    @classmethod
    def parse(cls, data: Union[bytes, bytearray, memoryview]) -> Profile:
        """Decode a profile from gzipped or raw pprof bytes.

        Raises PprofError if the bytes are not a well-formed profile, and
        TypeError if ``data`` is not bytes-like.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"pprof data must be bytes, not {type(data).__name__}")
        raw = bytes(data)
        if raw[:2] == _GZIP_MAGIC:
            raw = _gunzip(raw)
        if not raw:
            raise PprofError("empty profile")
        message = _decode_message(memoryview(raw), _PROFILE, "Profile")
        profile = _build_profile(message)
        profile.validate()
        return profile

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


def _check_ids(items: List[Any], what: str) -> None:
    """Raise PprofError unless every item's id is non-zero and unique."""
    seen = set()
    for item in items:
        if item.id == 0:
            raise PprofError(f"{what} with id 0 (ids must be non-zero)")
        if item.id in seen:
            raise PprofError(f"duplicate {what} id {item.id}")
        seen.add(item.id)


# --------------------------------------------------------------------------
# Wire format.

_GZIP_MAGIC = b"\x1f\x8b"

_WIRE_VARINT = 0
_WIRE_I64 = 1
_WIRE_LEN = 2
_WIRE_I32 = 5

_U64_MASK = (1 << 64) - 1

# Scalar kinds a schema field may have; a nested schema (dict) means a message.
_INT64 = "int64"
_UINT64 = "uint64"
_BOOL = "bool"
_STRING = "string"

# A schema maps field numbers to (name, kind, repeated). Field numbers and
# types are those of google/pprof proto/profile.proto.
_Schema = Dict[int, Tuple[str, Any, bool]]

_VALUE_TYPE: _Schema = {
    1: ("type", _INT64, False),  # string-table index
    2: ("unit", _INT64, False),  # string-table index
}
_LABEL: _Schema = {
    1: ("key", _INT64, False),
    2: ("str", _INT64, False),
    3: ("num", _INT64, False),
    4: ("num_unit", _INT64, False),
}
_SAMPLE: _Schema = {
    1: ("location_id", _UINT64, True),
    2: ("value", _INT64, True),
    3: ("label", _LABEL, True),
}
_MAPPING: _Schema = {
    1: ("id", _UINT64, False),
    2: ("memory_start", _UINT64, False),
    3: ("memory_limit", _UINT64, False),
    4: ("file_offset", _UINT64, False),
    5: ("filename", _INT64, False),
    6: ("build_id", _INT64, False),
    7: ("has_functions", _BOOL, False),
    8: ("has_filenames", _BOOL, False),
    9: ("has_line_numbers", _BOOL, False),
    10: ("has_inline_frames", _BOOL, False),
}
_LINE: _Schema = {
    1: ("function_id", _UINT64, False),
    2: ("line", _INT64, False),
    3: ("column", _INT64, False),
}
_LOCATION: _Schema = {
    1: ("id", _UINT64, False),
    2: ("mapping_id", _UINT64, False),
    3: ("address", _UINT64, False),
    4: ("line", _LINE, True),
    5: ("is_folded", _BOOL, False),
}
_FUNCTION: _Schema = {
    1: ("id", _UINT64, False),
    2: ("name", _INT64, False),
    3: ("system_name", _INT64, False),
    4: ("filename", _INT64, False),
    5: ("start_line", _INT64, False),
}
_PROFILE: _Schema = {
    1: ("sample_type", _VALUE_TYPE, True),
    2: ("sample", _SAMPLE, True),
    3: ("mapping", _MAPPING, True),
    4: ("location", _LOCATION, True),
    5: ("function", _FUNCTION, True),
    6: ("string_table", _STRING, True),
    7: ("drop_frames", _INT64, False),
    8: ("keep_frames", _INT64, False),
    9: ("time_nanos", _INT64, False),
    10: ("duration_nanos", _INT64, False),
    11: ("period_type", _VALUE_TYPE, False),
    12: ("period", _INT64, False),
    13: ("comment", _INT64, True),
    14: ("default_sample_type", _INT64, False),
    15: ("doc_url", _INT64, False),
}


def _gunzip(data: bytes) -> bytes:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise PprofError(f"bad gzip data: {e}") from None


def _read_varint(buf: memoryview, pos: int, what: str) -> Tuple[int, int]:
    """Decode the varint at ``pos``; return (value, position after it).

    Padded (non-canonical) varints are accepted: samprof's encoder writes
    nested-message lengths that way.
    """
    end = len(buf)
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise PprofError(f"truncated varint in {what}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift >= 70:
            raise PprofError(f"varint longer than 10 bytes in {what}")
    if result > _U64_MASK:
        raise PprofError(f"varint overflows 64 bits in {what}")
    return result, pos


def _packed_varints(buf: memoryview, what: str) -> List[int]:
    values = []
    pos = 0
    end = len(buf)
    while pos < end:
        value, pos = _read_varint(buf, pos, what)
        values.append(value)
    return values


def _convert(value: int, kind: str) -> Union[int, bool]:
    if kind == _INT64:
        return value - (1 << 64) if value >> 63 else value
    if kind == _BOOL:
        return value != 0
    return value


def _decode_message(buf: memoryview, schema: _Schema, what: str) -> Dict[str, Any]:
    """Decode one message into a dict of field name to value (a list for
    repeated fields); unknown fields are skipped, absent ones left out."""
    out: Dict[str, Any] = {}
    for name, _kind, repeated in schema.values():
        if repeated:
            out[name] = []
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos, what)
        number = key >> 3
        wire = key & 7
        if number == 0:
            raise PprofError(f"field number 0 in {what}")
        value: Any
        if wire == _WIRE_VARINT:
            value, pos = _read_varint(buf, pos, what)
        elif wire == _WIRE_LEN:
            length, pos = _read_varint(buf, pos, what)
            if length > end - pos:
                raise PprofError(
                    f"truncated field {number} in {what}: needs {length} bytes, {end - pos} left"
                )
            value = buf[pos : pos + length]
            pos += length
        elif wire in (_WIRE_I64, _WIRE_I32):
            size = 8 if wire == _WIRE_I64 else 4
            if size > end - pos:
                raise PprofError(f"truncated fixed-size field {number} in {what}")
            value = int.from_bytes(buf[pos : pos + size], "little")
            pos += size
        else:
            # Groups (3, 4) are long deprecated and profile.proto has none;
            # 6 and 7 do not exist. Either way this is not a profile.
            raise PprofError(f"unsupported wire type {wire} for field {number} in {what}")

        spec = schema.get(number)
        if spec is None:
            continue
        name, kind, repeated = spec
        path = f"{what}.{name}"
        decoded: Any
        if isinstance(kind, dict):
            if wire != _WIRE_LEN:
                raise PprofError(f"{path} has wire type {wire}, expected a message")
            decoded = _decode_message(value, kind, path)
        elif kind == _STRING:
            if wire != _WIRE_LEN:
                raise PprofError(f"{path} has wire type {wire}, expected a string")
            decoded = str(value, "utf-8", "replace")
        elif wire == _WIRE_LEN and repeated:
            out[name].extend(_convert(v, kind) for v in _packed_varints(value, path))
            continue
        elif wire == _WIRE_VARINT:
            decoded = _convert(value, kind)
        else:
            raise PprofError(f"{path} has wire type {wire}, expected a varint")
        if repeated:
            out[name].append(decoded)
        else:
            # Protobuf semantics: the last occurrence of a singular field wins.
            out[name] = decoded
    return out


def _build_profile(m: Dict[str, Any]) -> Profile:
    """Turn a decoded Profile message into dataclasses, resolving every
    string-table index. Raises PprofError for an index out of range."""
    table: List[str] = m["string_table"]
    if not table or table[0] != "":
        raise PprofError("string_table[0] must be the empty string (not a pprof profile?)")

    def s(message: Dict[str, Any], name: str, what: str) -> str:
        index: int = message.get(name, 0)
        if not 0 <= index < len(table):
            raise PprofError(
                f"{what}.{name}: string index {index} out of range "
                f"(string table has {len(table)} entries)"
            )
        return table[index]

    def value_type(vt: Dict[str, Any], what: str) -> ValueType:
        return ValueType(s(vt, "type", what), s(vt, "unit", what))

    samples = []
    for i, sm in enumerate(m["sample"]):
        what = f"Profile.sample[{i}].label"
        labels = [
            Label(
                key=s(lb, "key", what),
                str_value=s(lb, "str", what),
                num=lb.get("num", 0),
                num_unit=s(lb, "num_unit", what),
            )
            for lb in sm["label"]
        ]
        samples.append(Sample(sm["location_id"], sm["value"], labels))

    mappings = [
        Mapping(
            id=mp.get("id", 0),
            memory_start=mp.get("memory_start", 0),
            memory_limit=mp.get("memory_limit", 0),
            file_offset=mp.get("file_offset", 0),
            filename=s(mp, "filename", "Profile.mapping"),
            build_id=s(mp, "build_id", "Profile.mapping"),
            has_functions=mp.get("has_functions", False),
            has_filenames=mp.get("has_filenames", False),
            has_line_numbers=mp.get("has_line_numbers", False),
            has_inline_frames=mp.get("has_inline_frames", False),
        )
        for mp in m["mapping"]
    ]
    locations = [
        Location(
            id=loc.get("id", 0),
            mapping_id=loc.get("mapping_id", 0),
            address=loc.get("address", 0),
            lines=[
                Line(ln.get("function_id", 0), ln.get("line", 0), ln.get("column", 0))
                for ln in loc["line"]
            ],
            is_folded=loc.get("is_folded", False),
        )
        for loc in m["location"]
    ]
    functions = [
        Function(
            id=fn.get("id", 0),
            name=s(fn, "name", "Profile.function"),
            system_name=s(fn, "system_name", "Profile.function"),
            filename=s(fn, "filename", "Profile.function"),
            start_line=fn.get("start_line", 0),
        )
        for fn in m["function"]
    ]
    comments = []
    for index in m["comment"]:
        comments.append(s({"comment": index}, "comment", "Profile"))
    return Profile(
        sample_types=[value_type(vt, "Profile.sample_type") for vt in m["sample_type"]],
        samples=samples,
        mappings=mappings,
        locations=locations,
        functions=functions,
        string_table=table,
        drop_frames=s(m, "drop_frames", "Profile"),
        keep_frames=s(m, "keep_frames", "Profile"),
        time_nanos=m.get("time_nanos", 0),
        duration_nanos=m.get("duration_nanos", 0),
        period_type=value_type(m.get("period_type", {}), "Profile.period_type"),
        period=m.get("period", 0),
        comments=comments,
        default_sample_type=s(m, "default_sample_type", "Profile"),
        doc_url=s(m, "doc_url", "Profile"),
    )
