"""Finding the lines the DBGP tests stop at, and the engine in a thread."""

from __future__ import annotations

import functools
import os
from typing import Dict

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


@functools.cache
def _lines(path: str) -> Dict[str, int]:
    found = {}
    with open(path) as f:
        for number, text in enumerate(f, 1):
            if "# LINE " in text:
                found[text.split("# LINE ", 1)[1].strip()] = number
    return found


def line_of(script: str, name: str) -> int:
    """The line of ``script`` (in tests/scripts) tagged ``# LINE name``."""
    return _lines(os.path.join(SCRIPTS, script))[name]


def uri_of(script: str) -> str:
    return "file://" + os.path.join(SCRIPTS, script)
