"""Labels on samples, like Go's ``pprof.Do``.

Every sample (CPU or wall) that a thread takes inside a ``labels`` block
carries the block's labels as pprof string labels::

    with samprof.labels(route="/wiki", method="GET"):
        handle(request)

    @samprof.labels(job="reindex")
    def reindex(): ...

Then ``go tool pprof -tagfocus route=/wiki cpu.pb.gz`` shows only that
route's samples. Nested blocks add to and override the outer labels and
restore them on exit.

The source of truth is a ``contextvars.ContextVar`` holding the current
label set; entering a block also tells the C core the thread's label-set
id, which the signal handler copies into each sample without allocating.
Because the labels live in a context variable, a later asyncio integration
only needs to re-announce the current task's label set when the event loop
switches tasks.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar

from samprof import _samprof

_F = TypeVar("_F", bound=Callable[..., Any])

_LabelSet = Tuple[Tuple[str, str], ...]

# The label set in effect, as sorted (key, value) pairs.
_current: contextvars.ContextVar[_LabelSet] = contextvars.ContextVar(
    "samprof_labels", default=()
)
# Label set -> id registered with the core. Ids are never reused, so a
# sample's id always means the same labels. Guarded by _ids_lock for
# registration; reads are plain dict lookups.
_ids: Dict[_LabelSet, int] = {(): 0}
_ids_lock = threading.Lock()


def _id_of(label_set: _LabelSet) -> int:
    lid = _ids.get(label_set)
    if lid is None:
        with _ids_lock:
            lid = _ids.get(label_set)
            if lid is None:
                lid = _samprof.register_labelset(label_set)
                _ids[label_set] = lid
    return lid


class labels:
    """Context manager and decorator that labels the samples taken inside.

    Keys and values must be strings (``route="/wiki"``). A ``labels``
    object may be entered again (also from several threads, or
    recursively): each entry restores exactly what it replaced.
    """

    __slots__ = ("_pairs", "_tokens")

    def __init__(self, **kv: str) -> None:
        for key, value in kv.items():
            if not isinstance(value, str):
                raise TypeError(f"label {key}={value!r}: values must be str")
        self._pairs = kv
        # Per-thread stacks of what each entry replaced.
        self._tokens = threading.local()

    def __enter__(self) -> "labels":
        outer = _current.get()
        merged = dict(outer)
        merged.update(self._pairs)
        label_set = tuple(sorted(merged.items()))
        token = _current.set(label_set)
        previous = _samprof.set_thread_labels(_id_of(label_set))
        stack: Optional[List[Tuple[contextvars.Token[_LabelSet], int]]]
        stack = getattr(self._tokens, "stack", None)
        if stack is None:
            stack = self._tokens.stack = []
        stack.append((token, previous))
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        token, previous = self._tokens.stack.pop()
        _current.reset(token)
        _samprof.set_thread_labels(previous)

    def __call__(self, fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def current_labels() -> Dict[str, str]:
    """The labels in effect in the calling context."""
    return dict(_current.get())
