"""The protobuf wire format of a pprof profile, shared by the reader
(:mod:`samprof.pprof.decode`) and the writer (:mod:`samprof.pprof.encode`).

The message layout is google/pprof's ``proto/profile.proto``; its field
numbers are listed in docs/design.md §7. Each message is a schema
here, the one place field numbers are written down.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

GZIP_MAGIC = b"\x1f\x8b"

WIRE_VARINT = 0
WIRE_I64 = 1
WIRE_LEN = 2
WIRE_I32 = 5

U64_MASK = (1 << 64) - 1

# Scalar kinds a schema field may have; a nested schema (dict) means a message.
INT64 = "int64"
UINT64 = "uint64"
BOOL = "bool"
STRING = "string"

# A schema maps field numbers to (name, kind, repeated). Field numbers and
# types are those of google/pprof proto/profile.proto.
Schema = Dict[int, Tuple[str, Any, bool]]

VALUE_TYPE: Schema = {
    1: ("type", INT64, False),  # string-table index
    2: ("unit", INT64, False),  # string-table index
}
LABEL: Schema = {
    1: ("key", INT64, False),
    2: ("str", INT64, False),
    3: ("num", INT64, False),
    4: ("num_unit", INT64, False),
}
SAMPLE: Schema = {
    1: ("location_id", UINT64, True),
    2: ("value", INT64, True),
    3: ("label", LABEL, True),
}
MAPPING: Schema = {
    1: ("id", UINT64, False),
    2: ("memory_start", UINT64, False),
    3: ("memory_limit", UINT64, False),
    4: ("file_offset", UINT64, False),
    5: ("filename", INT64, False),
    6: ("build_id", INT64, False),
    7: ("has_functions", BOOL, False),
    8: ("has_filenames", BOOL, False),
    9: ("has_line_numbers", BOOL, False),
    10: ("has_inline_frames", BOOL, False),
}
LINE: Schema = {
    1: ("function_id", UINT64, False),
    2: ("line", INT64, False),
    3: ("column", INT64, False),
}
LOCATION: Schema = {
    1: ("id", UINT64, False),
    2: ("mapping_id", UINT64, False),
    3: ("address", UINT64, False),
    4: ("line", LINE, True),
    5: ("is_folded", BOOL, False),
}
FUNCTION: Schema = {
    1: ("id", UINT64, False),
    2: ("name", INT64, False),
    3: ("system_name", INT64, False),
    4: ("filename", INT64, False),
    5: ("start_line", INT64, False),
}
PROFILE: Schema = {
    1: ("sample_type", VALUE_TYPE, True),
    2: ("sample", SAMPLE, True),
    3: ("mapping", MAPPING, True),
    4: ("location", LOCATION, True),
    5: ("function", FUNCTION, True),
    6: ("string_table", STRING, True),
    7: ("drop_frames", INT64, False),
    8: ("keep_frames", INT64, False),
    9: ("time_nanos", INT64, False),
    10: ("duration_nanos", INT64, False),
    11: ("period_type", VALUE_TYPE, False),
    12: ("period", INT64, False),
    13: ("comment", INT64, True),
    14: ("default_sample_type", INT64, False),
    15: ("doc_url", INT64, False),
}


def field_numbers(schema: Schema) -> Dict[str, int]:
    """A message's field numbers by field name."""
    return {name: number for number, (name, _kind, _repeated) in schema.items()}
