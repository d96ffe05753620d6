"""A small program with hot spots of different costs, to try samprof on.

    samprof record --hz 1000 -o demo.pb.gz -- demo/demo.py --seconds 2
    samprof top demo.pb.gz
    go tool pprof -top demo.pb.gz

What to expect in the profile:

- ``Parser.parse`` and the recursive ``Parser.parse_expr``/``parse_term``/
  ``parse_factor`` behind it take about half of the main thread's CPU. The
  recursion shows why ``cum`` counts a function once per sample.
- ``render_template`` takes about a third; ``escape_html`` is its leaf.
- ``checksum`` runs in its own thread (``thread_name=checksum``) and spends
  its time in hashlib's C code with the GIL released, so it runs in parallel
  with the main thread and the total CPU exceeds the wall-clock duration.
- ``idle_wait`` sleeps; it uses no CPU, so a CPU profile never shows it.

The program prints one summary line to stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import threading
import time
from typing import Dict, List, Optional, Sequence


class Parser:
    """A recursive-descent parser and evaluator for arithmetic expressions
    with ``+ - * /`` and parentheses."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: List[str] = []
        self.pos = 0

    def tokenize(self) -> List[str]:
        tokens = []
        number = ""
        for ch in self.text:
            if ch.isdigit():
                number += ch
                continue
            if number:
                tokens.append(number)
                number = ""
            if ch in "+-*/()":
                tokens.append(ch)
        if number:
            tokens.append(number)
        return tokens

    def parse(self) -> float:
        """Tokenize and evaluate the whole expression."""
        self.tokens = self.tokenize()
        self.pos = 0
        return self.parse_expr()

    def parse_expr(self) -> float:
        value = self.parse_term()
        while self.pos < len(self.tokens) and self.tokens[self.pos] in "+-":
            op = self.tokens[self.pos]
            self.pos += 1
            rhs = self.parse_term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def parse_term(self) -> float:
        value = self.parse_factor()
        while self.pos < len(self.tokens) and self.tokens[self.pos] in "*/":
            op = self.tokens[self.pos]
            self.pos += 1
            rhs = self.parse_factor()
            value = value * rhs if op == "*" else value / (rhs or 1.0)
        return value

    def parse_factor(self) -> float:
        token = self.tokens[self.pos]
        self.pos += 1
        if token == "(":
            value = self.parse_expr()
            self.pos += 1  # ")"
            return value
        return float(token)


def make_expression(rng: random.Random, depth: int) -> str:
    """A random expression nested ``depth`` levels deep."""
    if depth == 0:
        return str(rng.randint(1, 99))
    op = rng.choice("+-*/")
    left = make_expression(rng, depth - 1)
    right = make_expression(rng, rng.randint(0, depth - 1))
    return f"({left} {op} {right})"


def escape_html(text: str) -> str:
    out = []
    for ch in text:
        if ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("&gt;")
        elif ch == "&":
            out.append("&amp;")
        else:
            out.append(ch)
    return "".join(out)


def render_template(template: str, context: Dict[str, str]) -> str:
    """Replace each ``{{name}}`` in ``template`` with the escaped value."""
    out = []
    pos = 0
    while True:
        start = template.find("{{", pos)
        if start < 0:
            out.append(template[pos:])
            break
        end = template.index("}}", start)
        out.append(template[pos:start])
        out.append(escape_html(context[template[start + 2 : end].strip()]))
        pos = end + 2
    return "".join(out)


TEMPLATE = "<tr><td>{{ name }}</td><td>{{ expression }}</td><td>{{ value }}</td></tr>\n" * 4


def checksum(data: bytes, stop: threading.Event, digests: List[str]) -> None:
    """Hash ``data`` over and over until ``stop`` is set. hashlib releases
    the GIL for large buffers, so this runs in parallel with the main thread.
    """
    while not stop.is_set():
        digest = hashlib.sha256(data)
        for _ in range(3):
            digest = hashlib.sha256(digest.digest() + data)
        digests.append(digest.hexdigest())
        idle_wait(stop, 0.004)


def idle_wait(stop: threading.Event, seconds: float) -> None:
    """Sleep: no CPU time, so invisible in a CPU profile."""
    stop.wait(seconds)


def run(seconds: float, seed: int = 1) -> Dict[str, int]:
    """Do the demo's work for about ``seconds`` of wall-clock time."""
    rng = random.Random(seed)
    stop = threading.Event()
    digests: List[str] = []
    hasher = threading.Thread(
        target=checksum, args=(rng.randbytes(1 << 20), stop, digests), name="checksum"
    )
    hasher.start()
    expressions = [make_expression(rng, 7) for _ in range(200)]
    parsed = rendered = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            values = [Parser(text).parse() for text in expressions]
            parsed += len(values)
            for text, value in zip(expressions[:60], values):
                context = {"name": f"row{rendered}", "expression": text, "value": f"{value:g}"}
                rendered += 1 if render_template(TEMPLATE, context) else 0
    finally:
        stop.set()
        hasher.join()
    return {"parsed": parsed, "rendered": rendered, "hashed": len(digests)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="how long to run (default 2)")
    args = parser.parse_args(argv)
    counts = run(args.seconds)
    print(
        f"parsed {counts['parsed']} expressions, rendered {counts['rendered']} rows, "
        f"hashed {counts['hashed']} MiB blocks"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
