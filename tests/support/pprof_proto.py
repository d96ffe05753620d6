"""An independent pprof decoder for the tests, built on google.protobuf.

The message classes of google/pprof's ``proto/profile.proto`` are made at
import time from a FileDescriptorProto written out below, so neither protoc
nor a generated ``profile_pb2`` is needed. Tests decode every profile with
these classes as well as with ``samprof.pprof``, so a bug in one reader
cannot hide a bug in the encoder.

    msg = pprof_proto.decode(data)          # gunzips if needed
    pprof_proto.check_well_formed(msg)      # raises AssertionError
    Profile = pprof_proto.message_class("Profile", packed=False)

:class:`ProfileBuilder` is a tiny encoder on the same classes, for tests
that need a profile with known contents.
"""

from __future__ import annotations

import gzip
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "perftools.profiles"

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL = _F.LABEL_OPTIONAL
_REPEATED = _F.LABEL_REPEATED
_INT64 = _F.TYPE_INT64
_UINT64 = _F.TYPE_UINT64
_BOOL = _F.TYPE_BOOL
_STRING = _F.TYPE_STRING
_MESSAGE = _F.TYPE_MESSAGE

# message name -> [(field name, number, label, type, message type name)],
# transcribed from profile.proto (docs/design.md section 7).
_MESSAGES: Dict[str, List[Tuple[str, int, int, int, str]]] = {
    "Profile": [
        ("sample_type", 1, _REPEATED, _MESSAGE, "ValueType"),
        ("sample", 2, _REPEATED, _MESSAGE, "Sample"),
        ("mapping", 3, _REPEATED, _MESSAGE, "Mapping"),
        ("location", 4, _REPEATED, _MESSAGE, "Location"),
        ("function", 5, _REPEATED, _MESSAGE, "Function"),
        ("string_table", 6, _REPEATED, _STRING, ""),
        ("drop_frames", 7, _OPTIONAL, _INT64, ""),
        ("keep_frames", 8, _OPTIONAL, _INT64, ""),
        ("time_nanos", 9, _OPTIONAL, _INT64, ""),
        ("duration_nanos", 10, _OPTIONAL, _INT64, ""),
        ("period_type", 11, _OPTIONAL, _MESSAGE, "ValueType"),
        ("period", 12, _OPTIONAL, _INT64, ""),
        ("comment", 13, _REPEATED, _INT64, ""),
        ("default_sample_type", 14, _OPTIONAL, _INT64, ""),
        ("doc_url", 15, _OPTIONAL, _INT64, ""),
    ],
    "ValueType": [
        ("type", 1, _OPTIONAL, _INT64, ""),
        ("unit", 2, _OPTIONAL, _INT64, ""),
    ],
    "Sample": [
        ("location_id", 1, _REPEATED, _UINT64, ""),
        ("value", 2, _REPEATED, _INT64, ""),
        ("label", 3, _REPEATED, _MESSAGE, "Label"),
    ],
    "Label": [
        ("key", 1, _OPTIONAL, _INT64, ""),
        ("str", 2, _OPTIONAL, _INT64, ""),
        ("num", 3, _OPTIONAL, _INT64, ""),
        ("num_unit", 4, _OPTIONAL, _INT64, ""),
    ],
    "Mapping": [
        ("id", 1, _OPTIONAL, _UINT64, ""),
        ("memory_start", 2, _OPTIONAL, _UINT64, ""),
        ("memory_limit", 3, _OPTIONAL, _UINT64, ""),
        ("file_offset", 4, _OPTIONAL, _UINT64, ""),
        ("filename", 5, _OPTIONAL, _INT64, ""),
        ("build_id", 6, _OPTIONAL, _INT64, ""),
        ("has_functions", 7, _OPTIONAL, _BOOL, ""),
        ("has_filenames", 8, _OPTIONAL, _BOOL, ""),
        ("has_line_numbers", 9, _OPTIONAL, _BOOL, ""),
        ("has_inline_frames", 10, _OPTIONAL, _BOOL, ""),
    ],
    "Location": [
        ("id", 1, _OPTIONAL, _UINT64, ""),
        ("mapping_id", 2, _OPTIONAL, _UINT64, ""),
        ("address", 3, _OPTIONAL, _UINT64, ""),
        ("line", 4, _REPEATED, _MESSAGE, "Line"),
        ("is_folded", 5, _OPTIONAL, _BOOL, ""),
    ],
    "Line": [
        ("function_id", 1, _OPTIONAL, _UINT64, ""),
        ("line", 2, _OPTIONAL, _INT64, ""),
        ("column", 3, _OPTIONAL, _INT64, ""),
    ],
    "Function": [
        ("id", 1, _OPTIONAL, _UINT64, ""),
        ("name", 2, _OPTIONAL, _INT64, ""),
        ("system_name", 3, _OPTIONAL, _INT64, ""),
        ("filename", 4, _OPTIONAL, _INT64, ""),
        ("start_line", 5, _OPTIONAL, _INT64, ""),
    ],
}


def _file_descriptor(packed: bool) -> descriptor_pb2.FileDescriptorProto:
    """profile.proto as a FileDescriptorProto. proto3 packs repeated scalars
    by default, as pprof's writers do; ``packed=False`` makes a variant that
    writes them one field per value, which readers must accept too."""
    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.name = "samprof_tests/profile.proto" if packed else "samprof_tests/profile_unpacked.proto"
    fdp.package = PACKAGE if packed else PACKAGE + ".unpacked"
    fdp.syntax = "proto3"
    for message_name, fields in _MESSAGES.items():
        message = fdp.message_type.add()
        message.name = message_name
        for name, number, label, type_, type_name in fields:
            f = message.field.add()
            f.name = name
            f.number = number
            f.label = label
            f.type = type_
            if type_name:
                f.type_name = f".{fdp.package}.{type_name}"
            if not packed and label == _REPEATED and type_ != _MESSAGE and type_ != _STRING:
                f.options.packed = False
    return fdp


def _message_classes(packed: bool) -> Dict[str, Any]:
    fdp = _file_descriptor(packed)
    # A private pool, so these classes cannot clash with a generated
    # profile_pb2 that the environment might also have loaded.
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    classes = {}
    for name in _MESSAGES:
        descriptor = pool.FindMessageTypeByName(f"{fdp.package}.{name}")
        if hasattr(message_factory, "GetMessageClass"):
            # protobuf >= 4.22 (and the only way in 5.x and later).
            classes[name] = message_factory.GetMessageClass(descriptor)
        else:
            classes[name] = message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return classes


_CLASSES = {True: _message_classes(True), False: _message_classes(False)}


def message_class(name: str, packed: bool = True) -> Any:
    """The generated class of message ``name`` (e.g. ``"Profile"``)."""
    return _CLASSES[packed][name]


def decode(data: bytes) -> Any:
    """Parse pprof bytes (gzipped or raw) into a Profile message."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    profile = message_class("Profile")()
    profile.ParseFromString(data)
    return profile


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _check_ids(items: Iterable[Any], what: str) -> Dict[int, Any]:
    by_id: Dict[int, Any] = {}
    for item in items:
        _require(item.id != 0, f"{what} with id 0")
        _require(item.id not in by_id, f"duplicate {what} id {item.id}")
        by_id[item.id] = item
    return by_id


def check_well_formed(msg: Any) -> None:
    """Assert the invariants pprof readers rely on (AssertionError if not):
    ``string_table[0] == ""``, every string index in range, ids non-zero and
    unique, one value per sample type in every sample, every location
    referenced exists, has a line, and belongs to an existing mapping, and
    every line's function exists."""
    strings = msg.string_table
    _require(len(strings) > 0 and strings[0] == "", "string_table[0] must be ''")

    def check_index(index: int, what: str) -> None:
        _require(
            0 <= index < len(strings),
            f"{what}: string index {index} out of range ({len(strings)} strings)",
        )

    for vt in list(msg.sample_type) + [msg.period_type]:
        check_index(vt.type, "ValueType.type")
        check_index(vt.unit, "ValueType.unit")
    for name in ("drop_frames", "keep_frames", "default_sample_type", "doc_url"):
        check_index(getattr(msg, name), f"Profile.{name}")
    for index in msg.comment:
        check_index(index, "Profile.comment")

    mappings = _check_ids(msg.mapping, "mapping")
    for m in msg.mapping:
        check_index(m.filename, "Mapping.filename")
        check_index(m.build_id, "Mapping.build_id")
    functions = _check_ids(msg.function, "function")
    for f in msg.function:
        for name in ("name", "system_name", "filename"):
            check_index(getattr(f, name), f"Function.{name}")
    locations = _check_ids(msg.location, "location")
    for loc in msg.location:
        _require(len(loc.line) > 0, f"location {loc.id} has no line")
        _require(
            loc.mapping_id in mappings,
            f"location {loc.id} refers to unknown mapping {loc.mapping_id}",
        )
        for line in loc.line:
            _require(
                line.function_id in functions,
                f"location {loc.id} refers to unknown function {line.function_id}",
            )

    if len(msg.sample) > 0:
        _require(len(msg.sample_type) > 0, "samples present but no sample types")
    for i, sample in enumerate(msg.sample):
        _require(
            len(sample.value) == len(msg.sample_type),
            f"sample {i} has {len(sample.value)} values for {len(msg.sample_type)} sample types",
        )
        for location_id in sample.location_id:
            _require(location_id in locations, f"sample {i}: unknown location {location_id}")
        for label in sample.label:
            check_index(label.key, "Label.key")
            check_index(label.str, "Label.str")
            check_index(label.num_unit, "Label.num_unit")


class ProfileBuilder:
    """Builds a pprof profile with known contents, interning strings::

        b = ProfileBuilder([("samples", "count"), ("cpu", "nanoseconds")])
        main = b.location(b.function("main", "app.py"), line=3)
        b.sample([main], [1, 10_000_000], thread_name="MainThread")
        data = b.encode()                   # gzipped pprof bytes

    ``packed=False`` writes repeated scalars unpacked. ``msg`` is the
    Profile message, free to be edited before encoding.
    """

    def __init__(
        self,
        sample_types: Sequence[Tuple[str, str]] = (("samples", "count"), ("cpu", "nanoseconds")),
        packed: bool = True,
        mapping: bool = True,
    ) -> None:
        self.packed = packed
        self.msg = message_class("Profile", packed)()
        self._strings: Dict[str, int] = {}
        self.string("")
        for type_, unit in sample_types:
            vt = self.msg.sample_type.add()
            vt.type = self.string(type_)
            vt.unit = self.string(unit)
        self._next_function = 1
        self._next_location = 1
        if mapping:
            m = self.msg.mapping.add()
            m.id = 1
            m.filename = self.string("python")
            m.has_functions = m.has_filenames = m.has_line_numbers = True

    def string(self, text: str) -> int:
        """The string-table index of ``text``, added if new."""
        index = self._strings.get(text)
        if index is None:
            index = self._strings[text] = len(self.msg.string_table)
            self.msg.string_table.append(text)
        return index

    def function(self, name: str, filename: str = "", start_line: int = 0) -> int:
        """Add a function; return its id."""
        f = self.msg.function.add()
        f.id = self._next_function
        self._next_function += 1
        f.name = f.system_name = self.string(name)
        f.filename = self.string(filename)
        f.start_line = start_line
        return f.id

    def location(
        self,
        function_id: int,
        line: int = 0,
        inlined: Sequence[Tuple[int, int]] = (),
        address: int = 0,
        mapping_id: int = 1,
    ) -> int:
        """Add a location at ``line`` of ``function_id``; ``inlined`` are
        (function id, line) pairs for callers inlined into it, innermost
        first. Returns the location's id."""
        loc = self.msg.location.add()
        loc.id = self._next_location
        self._next_location += 1
        loc.mapping_id = mapping_id
        loc.address = address
        for fid, lineno in [(function_id, line), *inlined]:
            ln = loc.line.add()
            ln.function_id = fid
            ln.line = lineno
        return loc.id

    def frame(self, name: str, filename: str = "", line: int = 0) -> int:
        """Shortcut: a new function with one location; returns the location id."""
        return self.location(self.function(name, filename), line)

    def sample(
        self,
        location_ids: Sequence[int],
        values: Sequence[int],
        labels: Optional[Mapping[str, Union[str, int]]] = None,
        **str_labels: Union[str, int],
    ) -> Any:
        """Add a sample (location ids leaf first). String values become
        string labels, ints numeric labels."""
        s = self.msg.sample.add()
        s.location_id.extend(location_ids)
        s.value.extend(values)
        for key, value in {**(labels or {}), **str_labels}.items():
            label = s.label.add()
            label.key = self.string(key)
            if isinstance(value, str):
                label.str = self.string(value)
            else:
                label.num = value
        return s

    def encode(self, gzipped: bool = True) -> bytes:
        """The profile as pprof bytes."""
        raw = self.msg.SerializeToString()
        return gzip.compress(raw) if gzipped else raw
