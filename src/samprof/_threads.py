"""What every thread (and every asyncio task) is doing now: the
``goroutine`` endpoint of /debug/pprof, which Go fills with its goroutines
and samprof with the process's Python threads.

``snapshot()`` takes the stacks once; ``pprof()``, ``grouped_text()`` (Go's
``debug=1``: identical stacks counted together) and ``dump_text()`` (Go's
``debug=2``: every thread, then every task of every running event loop)
render them. Pure Python: no compiled core needed.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Dict, List, Optional, Tuple

Frame = Tuple[str, str, int]  # function, file, line; leaf first


@dataclass
class ThreadStack:
    ident: int
    native_id: Optional[int]
    name: str
    daemon: Optional[bool]  # None: not a threading.Thread
    stack: List[Frame]


@dataclass
class TaskStack:
    loop_thread: str
    name: str
    coroutine: str
    state: str
    stack: List[Frame]


def _function(frame: FrameType) -> str:
    code = frame.f_code
    return getattr(code, "co_qualname", code.co_name)  # qualified from 3.11


def _frames(frame: Optional[FrameType]) -> List[Frame]:
    out: List[Frame] = []
    while frame is not None:
        out.append((_function(frame), frame.f_code.co_filename, frame.f_lineno or 0))
        frame = frame.f_back
    return out


def _loop_of(frame: Optional[FrameType]):
    """The event loop a thread's stack is running, found as ``self`` of
    its run_forever frame, or None."""
    import asyncio

    while frame is not None:
        if frame.f_code.co_name == "run_forever":
            loop = frame.f_locals.get("self")
            if isinstance(loop, asyncio.AbstractEventLoop):
                return loop
        frame = frame.f_back
    return None


def _tasks(loop, thread_name: str) -> List[TaskStack]:
    import asyncio

    out = []
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError:  # the loop's task set kept changing under us
        return out
    for task in tasks:
        coro = task.get_coro()
        state = "done" if task.done() else "pending"
        stack = []
        for frame in reversed(task.get_stack()):  # get_stack: outermost first
            stack.append((_function(frame), frame.f_code.co_filename, frame.f_lineno or 0))
        out.append(
            TaskStack(
                thread_name,
                task.get_name(),
                getattr(coro, "__qualname__", type(coro).__name__),
                state,
                stack,
            )
        )
    return out


@dataclass
class Snapshot:
    threads: List[ThreadStack]
    tasks: List[TaskStack]
    time_ns: int


def snapshot(with_tasks: bool = False) -> Snapshot:
    """Every thread's stack now (threads by ident order); with_tasks, also
    every task of the event loops those threads are running."""
    t = time.time_ns()
    frames = sys._current_frames()
    by_ident = {th.ident: th for th in threading.enumerate()}
    threads, tasks = [], []
    for ident in sorted(frames):
        th = by_ident.get(ident)
        name = th.name if th is not None else f"thread {ident}"
        threads.append(
            ThreadStack(
                ident,
                getattr(th, "native_id", None),
                name,
                th.daemon if th is not None else None,
                _frames(frames[ident]),
            )
        )
        if with_tasks:
            loop = _loop_of(frames[ident])
            if loop is not None:
                tasks.extend(_tasks(loop, name))
    return Snapshot(threads, tasks, t)


def pprof(snap: Snapshot) -> bytes:
    """Go's goroutine profile: one sample per distinct stack, its value
    the number of threads on it; gzipped pprof."""
    from samprof.pprof import Frame as PFrame
    from samprof.pprof import Mapping, Profile, ValueType, write

    profile = Profile(
        sample_types=[ValueType("goroutine", "count")],
        period_type=ValueType("goroutine", "count"),
        period=1,
        time_nanos=snap.time_ns,
        # One mapping for all the Python code, as samprof's other profiles
        # have: its functions, files and lines are known.
        mappings=[
            Mapping(
                1,
                filename="python",
                has_functions=True,
                has_filenames=True,
                has_line_numbers=True,
            )
        ],
    )
    for stack, members in _grouped(snap.threads):
        profile.add_sample([PFrame(*f) for f in stack], [len(members)])
    for location in profile.locations:
        location.mapping_id = 1
    return write(profile)


def _grouped(threads: List[ThreadStack]) -> List[Tuple[Tuple[Frame, ...], List[ThreadStack]]]:
    groups: Dict[Tuple[Frame, ...], List[ThreadStack]] = {}
    for th in threads:
        groups.setdefault(tuple(th.stack), []).append(th)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def grouped_text(snap: Snapshot) -> str:
    """Go's debug=1: identical stacks once, with how many threads share
    them (and their names)."""
    lines = [f"goroutine profile: total {len(snap.threads)}"]
    for stack, members in _grouped(snap.threads):
        lines.append(f"{len(members)} @ " + ", ".join(th.name for th in members))
        lines.extend(f"#\t{fn}\t{file}:{line}" for fn, file, line in stack)
        lines.append("")
    return "\n".join(lines) + "\n"


def dump_text(snap: Snapshot) -> str:
    """Go's debug=2: every thread with its id, name and daemon flag, its
    frames innermost first; then every asyncio task of every running loop."""
    out = []
    for th in snap.threads:
        kind = "" if th.daemon is None else (", daemon" if th.daemon else ", non-daemon")
        native = f" (native {th.native_id})" if th.native_id is not None else ""
        out.append(f"thread {th.ident}{native} [{th.name}{kind}]:")
        out.extend(_frame_lines(th.stack))
        out.append("")
    for task in snap.tasks:
        out.append(
            f"task {task.name} [{task.state}, coroutine {task.coroutine}, "
            f"loop in thread {task.loop_thread}]:"
        )
        out.extend(_frame_lines(task.stack))
        out.append("")
    return "\n".join(out) + "\n" if out else ""


def _frame_lines(stack: List[Frame]) -> List[str]:
    lines = []
    for fn, file, line in stack:
        lines.append(f"{fn}(...)")
        lines.append(f"\t{file}:{line}")
    return lines
