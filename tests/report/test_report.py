"""samprof.report.top on fabricated profiles with known numbers, checked
against hand-computed tables and against `go tool pprof -top`."""

from __future__ import annotations

import time

import pytest
from support.pprof_proto import ProfileBuilder
from support.profiles import go_pprof
from support.profiles import top_table as table

from samprof.pprof import Profile
from samprof.report import format_percent, format_value, top

MS = 1_000_000


def known_profile(duration_ns: int = 2_000 * MS) -> ProfileBuilder:
    """100 samples at 10ms each (1s of CPU) in 2s:

    - c <- b <- main    50 samples
    - b <- main         30
    - a <- main         15
    - a <- a <- main     5  (recursion: a's cum counts these once)

    flat: c 500ms, b 300ms, a 200ms, main 0;
    cum: main 1000ms, b 800ms, c 500ms, a 200ms.
    """
    b = ProfileBuilder()
    main = b.frame("main", "app.py", 10)
    fa = b.function("a", "app.py")
    a_leaf = b.location(fa, 20)
    a_rec = b.location(fa, 21)
    fb = b.function("b", "app.py")
    b_leaf = b.location(fb, 30)
    b_call = b.location(fb, 31)
    c = b.frame("c", "lib.py", 40)
    for stack, count in [
        ([c, b_call, main], 50),
        ([b_leaf, main], 30),
        ([a_leaf, main], 15),
        ([a_leaf, a_rec, main], 5),
    ]:
        b.sample(stack, [count, count * 10 * MS], thread_name="MainThread")
    b.msg.duration_nanos = duration_ns
    b.msg.period_type.type = b.string("cpu")
    b.msg.period_type.unit = b.string("nanoseconds")
    b.msg.period = 10 * MS
    return b


def parse(b: ProfileBuilder) -> Profile:
    return Profile.parse(b.encode())


def test_known_cpu_profile() -> None:
    out = top(parse(known_profile()))
    assert out == (
        "File: python\n"
        "Type: cpu\n"
        "Duration: 2s, Total samples = 1000ms (50.00%)\n"
        "Showing nodes accounting for 1000ms, 100% of 1000ms total\n"
        "      flat  flat%   sum%        cum   cum%\n"
        "     500ms 50.00% 50.00%      500ms 50.00%  c\n"
        "     300ms 30.00% 80.00%      800ms 80.00%  b\n"
        "     200ms 20.00%   100%      200ms 20.00%  a\n"
        "         0     0%   100%     1000ms   100%  main\n"
    )


def test_counts_sample_type() -> None:
    p = parse(known_profile())
    assert table(top(p, sample_type="samples")) == [
        ["50", "50.00%", "50.00%", "50", "50.00%", "c"],
        ["30", "30.00%", "80.00%", "80", "80.00%", "b"],
        ["20", "20.00%", "100%", "20", "20.00%", "a"],
        ["0", "0%", "100%", "100", "100%", "main"],
    ]
    # Counts have no unit, so there is no share of the duration.
    assert "Duration: 2s, Total samples = 100\n" in top(p, sample_type=0)
    assert top(p, sample_type="0") == top(p, sample_type="samples")
    assert top(p, sample_type="cpu") == top(p)


def test_default_sample_type() -> None:
    b = known_profile()
    b.msg.default_sample_type = b.string("samples")
    p = parse(b)
    assert top(p) == top(p, sample_type="samples")


def test_unknown_sample_type() -> None:
    p = parse(known_profile())
    with pytest.raises(ValueError, match="wall"):
        top(p, sample_type="wall")
    with pytest.raises(ValueError, match="out of range"):
        top(p, sample_type=2)
    with pytest.raises(ValueError):
        top(p, n=0)


def test_top_n() -> None:
    out = top(parse(known_profile()), n=2)
    assert "Showing nodes accounting for 800ms, 80.00% of 1000ms total\n" in out
    assert "Showing top 2 nodes out of 4\n" in out
    assert [row[-1] for row in table(out)] == ["c", "b"]


def test_small_nodes_are_dropped() -> None:
    b = known_profile()
    tiny = b.frame("tiny")
    b.sample([tiny, b.msg.sample[0].location_id[-1]], [1, 1 * MS])  # 0.1% of the total
    out = top(parse(b))
    assert "Dropped 1 node (cum <= 5ms)\n" in out
    assert "tiny" not in out
    assert "tiny" in top(parse(b), node_fraction=0)


@pytest.mark.parametrize(
    "small, expected",
    [
        # The smallest value's unit, when it keeps the largest below 100x...
        (30_000, ["2000us", "30us"]),
        # ... else the unit of 100 times the smallest, so nothing shows
        # below 0.01.
        (20_000, ["2ms", "0.02ms"]),
    ],
)
def test_output_unit_is_shared_by_all_rows(small: int, expected: list) -> None:
    b = ProfileBuilder()
    b.sample([b.frame("big")], [1, 2 * MS])
    b.sample([b.frame("small")], [1, small])
    out = top(parse(b))
    assert [row[0] for row in table(out)] == expected
    assert go_pprof(b.encode(), "-top").splitlines()[-2:] == out.splitlines()[-2:]


def test_empty_profile() -> None:
    out = top(parse(ProfileBuilder()))
    assert "Showing nodes accounting for 0, 0% of 0 total\n" in out
    assert table(out) == []


def test_samples_without_stack_count_in_total_only() -> None:
    b = known_profile()
    b.sample([], [100, 1000 * MS])
    out = top(parse(b))
    assert "Showing nodes accounting for 1000ms, 50.00% of 2000ms total\n" in out


def test_comments_and_time_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        b = known_profile()
        b.msg.comment.append(b.string("samprof mode=cpu"))
        b.msg.time_nanos = 1_704_207_845_000_000_000  # 2024-01-02 15:04:05 UTC
        lines = top(parse(b)).splitlines()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert lines[:4] == [
        "File: python",
        "samprof mode=cpu",
        "Type: cpu",
        "Time: Jan 2, 2024 at 3:04pm (UTC)",
    ]


@pytest.mark.parametrize(
    "value, unit, expected",
    [
        (0, "nanoseconds", "0"),
        (999, "nanoseconds", "999ns"),
        (1_000, "nanoseconds", "1us"),
        (1_500, "ns", "1.50us"),
        (450 * MS, "nanoseconds", "450ms"),
        (1_230 * MS, "nanoseconds", "1.23s"),
        (-1_230 * MS, "nanoseconds", "-1.23s"),
        (5, "milliseconds", "5ms"),
        (90, "seconds", "90s"),
        (7_200, "seconds", "2hrs"),
        (1234, "count", "1234"),
        (0, "count", "0"),
        (2048, "bytes", "2kB"),
        (3 << 20, "bytes", "3MB"),
        (7, "things", "7"),
    ],
)
def test_format_value(value: int, unit: str, expected: str) -> None:
    assert format_value(value, unit) == expected


def test_format_value_in_fixed_unit() -> None:
    assert format_value(1_230 * MS, "nanoseconds", "ms") == "1230ms"
    assert format_value(4 * MS, "nanoseconds", "s") == "0"
    assert format_value(5 * MS, "nanoseconds", "s") == "0.01s"
    assert format_value(12, "requests", "requests") == "12requests"


@pytest.mark.parametrize(
    "value, total, expected",
    [
        (1, 1, "  100%"),
        (9996, 10000, "  100%"),
        (1, 2, "50.00%"),
        (1, 3, "33.33%"),
        (1, 200, "  0.5%"),
        (1, 2000, " 0.05%"),
        (1, 30000, "0.0033%"),
        (0, 5, "    0%"),
        (3, 0, "    0%"),
        (-1, 2, "50.00%"),
    ],
)
def test_format_percent(value: int, total: int, expected: str) -> None:
    assert format_percent(value, total) == expected


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"n": 2},
        {"sample_type": "samples"},
    ],
)
def test_matches_go_tool_pprof(args: dict) -> None:
    b = known_profile()
    # Rows that tie on flat are ordered by name, then cum.
    b.sample([b.frame("zz")], [20, 200 * MS])
    b.sample([b.frame("aa")], [20, 200 * MS])
    b.sample([b.frame("tiny")], [1, 1 * MS])
    data = b.encode()
    go_args = ["-top"]
    if "n" in args:
        go_args.append(f"-nodecount={args['n']}")
    if "sample_type" in args:
        go_args.append(f"-sample_index={args['sample_type']}")
    ours = top(Profile.parse(data), **args)
    theirs = go_pprof(data, *go_args)
    # pprof leaves a trailing space after "Total samples = N" when there is
    # no percentage to print; samprof does not.
    theirs = "\n".join(line.rstrip() for line in theirs.splitlines()) + "\n"
    assert ours == theirs
