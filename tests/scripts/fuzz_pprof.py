"""Feeds samprof.pprof broken profiles for a while and reports anything that
is not handled as it must be.

    python fuzz_pprof.py SECONDS SEED

Each case is a valid profile broken one way: bytes flipped or replaced,
truncated, a huge varint or an out-of-range index put in, or its gzip
wrapping damaged. ``read`` must return a profile or raise PprofError; a
profile it returns must survive write, merge, diff and ``top`` (which may
raise only ValueError, e.g. for a profile without sample types). Prints
one JSON object: how many cases ran, of which kinds, and the failures (at
most 5, each with the input in hex).
"""

from __future__ import annotations

import gzip
import json
import random
import sys
import time
import traceback
from typing import Callable, Dict, List

from samprof import pprof
from samprof.pprof import Frame, Label, Profile, ValueType
from samprof.report import top


def seed_profile() -> bytes:
    """A small profile using every message, raw (not gzipped)."""
    p = Profile(
        sample_types=[ValueType("samples", "count"), ValueType("cpu", "nanoseconds")],
        period_type=ValueType("cpu", "nanoseconds"),
        period=10_000_000,
        time_nanos=1,
        duration_nanos=2,
        comments=["c"],
        default_sample_type="cpu",
    )
    p.add_sample([Frame("a", "a.py", 1), Frame("main", "m.py", 2)], [1, 10], {"k": "v"})
    p.add_sample([Frame("b", "b.py", 3), Frame("main", "m.py", 2)], [2, 20], {"n": 5})
    p.add_sample([Frame("c", "c.py", 4)], [3, 30], [Label("u", num=7, num_unit="bytes")])
    p.mappings.append(pprof.Mapping(1, 0x1000, 0x2000, 0, "bin", "id"))
    p.locations[0].mapping_id = 1
    return pprof.write(p, compress=False)


def _varint(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def flip_bits(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def replace_bytes(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def truncate(rng: random.Random, raw: bytes) -> bytes:
    return raw[: rng.randrange(len(raw))]


def huge_varint(rng: random.Random, raw: bytes) -> bytes:
    """A varint of 10 or more bytes, or one that overflows, at a random
    place: as a field key, a length or a value."""
    i = rng.randrange(len(raw))
    blob = rng.choice(
        [
            b"\xff" * 9 + b"\x01",  # 2**64 - 1
            b"\xff" * 10 + b"\x01",  # 11 bytes
            b"\xff" * 9 + b"\x7f",  # overflows 64 bits
            _varint(rng.randrange(1 << 64)),
        ]
    )
    return raw[:i] + blob + raw[i:]


def index_out_of_range(rng: random.Random, raw: bytes) -> bytes:
    """A new varint field, in the profile or inside a sample, whose value is
    far beyond any table."""
    number = rng.choice([7, 8, 13, 14, 15])  # string-table indexes
    field = _varint(number << 3) + _varint(rng.randrange(100, 1 << 63))
    if rng.random() < 0.5:
        return raw + field
    # A sample with a location id no location has.
    sample = _varint(1 << 3) + _varint(rng.randrange(100, 1 << 63)) + _varint(2 << 3) + b"\x01"
    sample += _varint(2 << 3) + b"\x01"
    return raw + _varint(2 << 3 | 2) + _varint(len(sample)) + sample


def damage_gzip(rng: random.Random, raw: bytes) -> bytes:
    gz = bytearray(gzip.compress(raw))
    how = rng.randrange(5)
    if how == 0:  # header
        gz[rng.randrange(2, 10)] ^= 0xFF
    elif how == 1:  # CRC or length in the trailer
        gz[len(gz) - 1 - rng.randrange(8)] ^= 1 << rng.randrange(8)
    elif how == 2:  # compressed stream
        gz[rng.randrange(10, len(gz) - 8)] ^= 1 << rng.randrange(8)
    elif how == 3:
        del gz[rng.randrange(2, len(gz)) :]
    else:  # trailing garbage
        gz += bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
    return bytes(gz)


MUTATIONS: Dict[str, Callable[[random.Random, bytes], bytes]] = {
    "flip_bits": flip_bits,
    "replace_bytes": replace_bytes,
    "truncate": truncate,
    "huge_varint": huge_varint,
    "index_out_of_range": index_out_of_range,
    "damage_gzip": damage_gzip,
}


def check(data: bytes) -> None:
    """Return if samprof.pprof handles ``data`` as it must; any other
    outcome raises (AssertionError for a wrong result)."""
    try:
        profile = pprof.read(data)
    except pprof.PprofError:
        return
    for action in (
        lambda: pprof.read(pprof.write(profile)) == profile or _fail("round trip differs"),
        lambda: pprof.merge([profile, profile]),
        lambda: pprof.diff(profile, profile),
        lambda: top(profile),
    ):
        try:
            action()
        except ValueError:
            pass


def _fail(message: str) -> None:
    raise AssertionError(message)


def main() -> None:
    seconds, seed = float(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    raw = seed_profile()
    check(raw)
    counts = {name: 0 for name in MUTATIONS}
    failures: List[dict] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(failures) < 5:
        name = rng.choice(list(MUTATIONS))
        data = MUTATIONS[name](rng, raw)
        if name != "damage_gzip" and rng.random() < 0.3:
            data = gzip.compress(data)
        counts[name] += 1
        try:
            check(data)
        except Exception as e:  # everything else is a finding
            failures.append(
                {
                    "mutation": name,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-2000:],
                    "input": data.hex(),
                }
            )
    print(json.dumps({"cases": sum(counts.values()), "by_mutation": counts, "failures": failures}))


if __name__ == "__main__":
    main()
