"""Code the DBGP tests debug. Its line numbers are part of the tests: they
find a line by the tag in its comment (support.debugging.line_of)."""

from __future__ import annotations

import asyncio


# Nothing runs on this line.  # LINE comment
class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y


def inner(n):
    total = n * 2  # LINE inner_body
    return total  # LINE inner_return


def outer(n):
    point = Point(n, n + 1)  # LINE outer_first
    items = {"a": [1, 2, {"deep": "value"}], "b": point, 3: "three"}
    doubled = inner(n)  # LINE outer_call
    message = f"n={n} doubled={doubled} x={point.x}"  # LINE outer_after
    print(message)  # LINE outer_print
    return message, items


def failing():
    try:
        raise KeyError("missing")  # LINE raise
    except KeyError:
        return "caught"


def loop(count):
    acc = 0
    for i in range(count):
        acc += i  # LINE loop_body
    return acc  # LINE loop_return


async def pause():
    await asyncio.sleep(0)
    return 1


async def handler(n):
    total = n  # LINE handler_first
    total += await pause()  # LINE handler_await
    await asyncio.sleep(0)  # LINE handler_sleep
    return total  # LINE handler_return
