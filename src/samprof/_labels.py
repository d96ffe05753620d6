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

The context manager is implemented in C: entering looks the merged label
set up in a cache and stores its id where the signal handler (thread-local
storage) and the wall sampler (the thread-state dict) read it, without
allocating in the handler. A label set is a small integer id, so a future
asyncio integration only has to save the id per task
(``_core.set_thread_labels`` returns the previous one) and restore it
when the event loop switches tasks.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, TypeVar

from samprof import _core

_F = TypeVar("_F", bound=Callable[..., Any])


class labels(_core.labels):
    """Context manager and decorator that labels the samples taken inside.

    Keys and values are strings: ``labels(route="/wiki")``. Blocks nest;
    an inner block adds to and overrides the outer labels until it exits.
    As a decorator, each call of the function runs in its own block, so a
    decorated function may run in several threads at once.
    """

    __slots__ = ()

    def __call__(self, fn: _F) -> _F:
        pairs = self.labels

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _core.labels(**pairs):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def current_labels() -> Dict[str, str]:
    """The labels in effect in the calling thread."""
    return dict(_core.thread_labels())
