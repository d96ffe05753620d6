"""The pprof writer: a :class:`Profile` to gzipped protobuf bytes.

Built the way Go's ``runtime/pprof`` encoder is (``protobuf.go``): one small
method per wire operation, zero-valued scalars left out (proto3), repeated
integers packed, nested messages written into the buffer and then prefixed
with their length, and a string table with ``""`` at index 0 that is built
while the messages are written. Field numbers come from the schemas in
:mod:`samprof.pprof.wire`, shared with the reader, so
``read(write(p)) == p`` for every valid profile ``p``.
"""

from __future__ import annotations

import gzip
from typing import Dict, Iterable, List

from samprof.pprof.profile import (
    Function,
    Label,
    Location,
    Mapping,
    PprofError,
    Profile,
    Sample,
    ValueType,
)
from samprof.pprof.wire import (
    FUNCTION,
    LABEL,
    LINE,
    LOCATION,
    MAPPING,
    PROFILE,
    SAMPLE,
    U64_MASK,
    VALUE_TYPE,
    WIRE_LEN,
    WIRE_VARINT,
    field_numbers,
)

__all__ = ["write"]

_P = field_numbers(PROFILE)
_VT = field_numbers(VALUE_TYPE)
_S = field_numbers(SAMPLE)
_LB = field_numbers(LABEL)
_M = field_numbers(MAPPING)
_LOC = field_numbers(LOCATION)
_LN = field_numbers(LINE)
_F = field_numbers(FUNCTION)

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def write(profile: Profile, compress: bool = True) -> bytes:
    """Encode ``profile`` as pprof: gzipped (what ``go tool pprof`` and the
    ``/debug/pprof`` endpoints use) unless ``compress`` is false.

    The profile is validated first. Raises PprofError if it is not valid
    (ids zero or repeated, references that do not resolve, a sample with the
    wrong number of values) or holds an integer out of its field's range.
    """
    profile.validate()
    raw = _Encoder().profile(profile)
    if not compress:
        return raw
    # mtime 0: the same profile always gives the same bytes.
    return gzip.compress(raw, compresslevel=6, mtime=0)


class _Encoder:
    """Appends protobuf fields to a buffer and keeps the string table.

    Integers are checked against their field's range as they are written;
    the first one out of range raises PprofError naming the field.
    """

    def __init__(self) -> None:
        self.buf = bytearray()
        self.strings: Dict[str, int] = {"": 0}
        self.table: List[str] = [""]

    # -- wire operations ---------------------------------------------------

    def _varint(self, x: int) -> None:
        buf = self.buf
        while x >= 0x80:
            buf.append((x & 0x7F) | 0x80)
            x >>= 7
        buf.append(x)

    def _key(self, number: int, wire: int) -> None:
        self._varint(number << 3 | wire)

    def _uint64(self, number: int, x: int, what: str) -> None:
        if not 0 <= x <= U64_MASK:
            raise PprofError(f"{what} = {x} does not fit in uint64")
        self._key(number, WIRE_VARINT)
        self._varint(x)

    def _uint64_opt(self, number: int, x: int, what: str) -> None:
        if x:
            self._uint64(number, x, what)

    def _int64(self, number: int, x: int, what: str) -> None:
        if not _INT64_MIN <= x <= _INT64_MAX:
            raise PprofError(f"{what} = {x} does not fit in int64")
        self._key(number, WIRE_VARINT)
        self._varint(x & U64_MASK)

    def _int64_opt(self, number: int, x: int, what: str) -> None:
        if x:
            self._int64(number, x, what)

    def _bool_opt(self, number: int, x: bool) -> None:
        if x:
            self._key(number, WIRE_VARINT)
            self._varint(1)

    def _packed(self, number: int, values: Iterable[int], signed: bool, what: str) -> None:
        """A repeated integer field, packed; nothing for an empty one."""
        start = self._start()
        low, high = (_INT64_MIN, _INT64_MAX) if signed else (0, U64_MASK)
        for x in values:
            if not low <= x <= high:
                kind = "int64" if signed else "uint64"
                raise PprofError(f"{what} holds {x}, out of range for {kind}")
            self._varint(x & U64_MASK)
        if len(self.buf) == start:
            return
        self._end(number, start)

    def _string_index(self, s: str) -> int:
        index = self.strings.get(s)
        if index is None:
            index = len(self.table)
            self.strings[s] = index
            self.table.append(s)
        return index

    def _string_opt(self, number: int, s: str) -> None:
        """A string field, as its string-table index; nothing for ""."""
        if s:
            self._key(number, WIRE_VARINT)
            self._varint(self._string_index(s))

    def _start(self) -> int:
        """Where a nested message (or packed field) begins; pass it to _end."""
        return len(self.buf)

    def _end(self, number: int, start: int) -> None:
        """Prefix the bytes written since ``start`` with the field's key and
        their length. Only those bytes move, so this is linear in the size of
        the nested message."""
        body = bytes(self.buf[start:])
        del self.buf[start:]
        self._key(number, WIRE_LEN)
        self._varint(len(body))
        self.buf += body

    # -- messages ----------------------------------------------------------

    def profile(self, p: Profile) -> bytes:
        for vt in p.sample_types:
            self._value_type(_P["sample_type"], vt)
        for i, sample in enumerate(p.samples):
            self._sample(sample, i)
        for mapping in p.mappings:
            self._mapping(mapping)
        for location in p.locations:
            self._location(location)
        for function in p.functions:
            self._function(function)
        body = self.buf
        # The string table comes after the messages that fill it, as field
        # 6; the header fields after it use strings too, so they are written
        # into a buffer of their own first.
        self.buf = bytearray()
        self._string_opt(_P["drop_frames"], p.drop_frames)
        self._string_opt(_P["keep_frames"], p.keep_frames)
        self._int64_opt(_P["time_nanos"], p.time_nanos, "time_nanos")
        self._int64_opt(_P["duration_nanos"], p.duration_nanos, "duration_nanos")
        if p.period_type.type or p.period_type.unit:
            self._value_type(_P["period_type"], p.period_type)
        self._int64_opt(_P["period"], p.period, "period")
        for comment in p.comments:
            self._key(_P["comment"], WIRE_VARINT)
            self._varint(self._string_index(comment))
        self._string_opt(_P["default_sample_type"], p.default_sample_type)
        self._string_opt(_P["doc_url"], p.doc_url)
        tail = self.buf

        self.buf = body
        for s in self.table:
            try:
                # A file name python decoded with surrogateescape goes back
                # to its bytes.
                data = s.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                data = s.encode("utf-8", "replace")
            self._key(_P["string_table"], WIRE_LEN)
            self._varint(len(data))
            self.buf += data
        self.buf += tail
        return bytes(self.buf)

    def _value_type(self, number: int, vt: ValueType) -> None:
        start = self._start()
        self._string_opt(_VT["type"], vt.type)
        self._string_opt(_VT["unit"], vt.unit)
        self._end(number, start)

    def _sample(self, sample: Sample, i: int) -> None:
        start = self._start()
        self._packed(_S["location_id"], sample.location_ids, False, f"sample {i} location_ids")
        self._packed(_S["value"], sample.values, True, f"sample {i} values")
        for label in sample.labels:
            self._label(label, i)
        self._end(_P["sample"], start)

    def _label(self, label: Label, i: int) -> None:
        start = self._start()
        self._string_opt(_LB["key"], label.key)
        self._string_opt(_LB["str"], label.str_value)
        self._int64_opt(_LB["num"], label.num, f"sample {i} label {label.key!r}")
        self._string_opt(_LB["num_unit"], label.num_unit)
        self._end(_S["label"], start)

    def _mapping(self, m: Mapping) -> None:
        start = self._start()
        what = f"mapping {m.id}"
        self._uint64_opt(_M["id"], m.id, f"{what} id")
        self._uint64_opt(_M["memory_start"], m.memory_start, f"{what} memory_start")
        self._uint64_opt(_M["memory_limit"], m.memory_limit, f"{what} memory_limit")
        self._uint64_opt(_M["file_offset"], m.file_offset, f"{what} file_offset")
        self._string_opt(_M["filename"], m.filename)
        self._string_opt(_M["build_id"], m.build_id)
        self._bool_opt(_M["has_functions"], m.has_functions)
        self._bool_opt(_M["has_filenames"], m.has_filenames)
        self._bool_opt(_M["has_line_numbers"], m.has_line_numbers)
        self._bool_opt(_M["has_inline_frames"], m.has_inline_frames)
        self._end(_P["mapping"], start)

    def _location(self, loc: Location) -> None:
        start = self._start()
        what = f"location {loc.id}"
        self._uint64_opt(_LOC["id"], loc.id, f"{what} id")
        self._uint64_opt(_LOC["mapping_id"], loc.mapping_id, f"{what} mapping_id")
        self._uint64_opt(_LOC["address"], loc.address, f"{what} address")
        for line in loc.lines:
            line_start = self._start()
            self._uint64_opt(_LN["function_id"], line.function_id, f"{what} function_id")
            self._int64_opt(_LN["line"], line.line, f"{what} line")
            self._int64_opt(_LN["column"], line.column, f"{what} column")
            self._end(_LOC["line"], line_start)
        self._bool_opt(_LOC["is_folded"], loc.is_folded)
        self._end(_P["location"], start)

    def _function(self, f: Function) -> None:
        start = self._start()
        what = f"function {f.id}"
        self._uint64_opt(_F["id"], f.id, f"{what} id")
        self._string_opt(_F["name"], f.name)
        self._string_opt(_F["system_name"], f.system_name)
        self._string_opt(_F["filename"], f.filename)
        self._int64_opt(_F["start_line"], f.start_line, f"{what} start_line")
        self._end(_P["function"], start)
