"""The pprof reader: gzipped or raw protobuf bytes to a :class:`Profile`.

It handles the whole protobuf wire format that profile.proto can produce:
varints (including padded ones), length-delimited fields, packed and
unpacked repeated scalars, and it skips fields it does not know. Anything
truncated, corrupt or inconsistent raises :class:`PprofError` with a message
that says what was wrong and where; no input makes it hang or recurse
deeper than the schema (three levels).
"""

from __future__ import annotations

import gzip
import zlib
from typing import Any, Dict, List, Tuple, Union

from samprof.pprof.profile import (
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
from samprof.pprof.wire import (
    BOOL,
    GZIP_MAGIC,
    INT64,
    PROFILE,
    STRING,
    U64_MASK,
    WIRE_I32,
    WIRE_I64,
    WIRE_LEN,
    WIRE_VARINT,
    Schema,
)

__all__ = ["read"]


def read(data: Union[bytes, bytearray, memoryview]) -> Profile:
    """Decode a profile from gzipped or raw pprof bytes.

    Raises PprofError if the bytes are not a well-formed profile, and
    TypeError if ``data`` is not bytes-like.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"pprof data must be bytes, not {type(data).__name__}")
    raw = bytes(data)
    if raw[:2] == GZIP_MAGIC:
        raw = _gunzip(raw)
    if not raw:
        raise PprofError("empty profile")
    message = _decode_message(memoryview(raw), PROFILE, "Profile")
    profile = _build_profile(message)
    profile.validate()
    return profile


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
    if result > U64_MASK:
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
    if kind == INT64:
        return value - (1 << 64) if value >> 63 else value
    if kind == BOOL:
        return value != 0
    return value


def _decode_message(buf: memoryview, schema: Schema, what: str) -> Dict[str, Any]:
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
        if wire == WIRE_VARINT:
            value, pos = _read_varint(buf, pos, what)
        elif wire == WIRE_LEN:
            length, pos = _read_varint(buf, pos, what)
            if length > end - pos:
                raise PprofError(
                    f"truncated field {number} in {what}: needs {length} bytes, {end - pos} left"
                )
            value = buf[pos : pos + length]
            pos += length
        elif wire in (WIRE_I64, WIRE_I32):
            size = 8 if wire == WIRE_I64 else 4
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
            if wire != WIRE_LEN:
                raise PprofError(f"{path} has wire type {wire}, expected a message")
            decoded = _decode_message(value, kind, path)
        elif kind == STRING:
            if wire != WIRE_LEN:
                raise PprofError(f"{path} has wire type {wire}, expected a string")
            decoded = str(value, "utf-8", "replace")
        elif wire == WIRE_LEN and repeated:
            out[name].extend(_convert(v, kind) for v in _packed_varints(value, path))
            continue
        elif wire == WIRE_VARINT:
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
