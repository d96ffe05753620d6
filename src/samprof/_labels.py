"""Labels on samples, like Go's ``pprof.Do``.

Every sample (CPU, wall or heap) taken inside a ``labels`` block carries
the block's labels as pprof string labels::

    with samprof.labels(route="/wiki", method="GET"):
        handle(request)

    @samprof.labels(job="reindex")
    def reindex(): ...

Then ``go tool pprof -tagfocus route=/wiki cpu.pb.gz`` shows only that
route's samples. Nested blocks add to and override the outer labels and
restore them on exit.

The labels in effect belong to the execution context, as the value of a
``contextvars.ContextVar`` does: each thread has its own, and so does each
asyncio task, which starts with the labels of the code that created it. So
two requests whose coroutines interleave on one event loop keep their own
labels across every ``await``, and ``asyncio.to_thread`` or
``contextvars.copy_context().run`` carry them along; a new
``threading.Thread`` starts without any.

The context manager is implemented in C: entering looks the merged label
set up in a cache and sets the context variable to its id; the samplers
read that variable without calling into Python (docs/design.md).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, TypeVar

from samprof import _core

_F = TypeVar("_F", bound=Callable[..., Any])

# Labels samprof sets for its own bookkeeping (the web middleware's marker
# of a triggered request's samples): kept out of current_labels().
INTERNAL_LABELS = frozenset({"samprof_request"})


class labels(_core.labels):
    """Context manager and decorator that labels the samples taken inside.

    Keys and values are strings: ``labels(route="/wiki")``. Blocks nest;
    an inner block adds to and overrides the outer labels until it exits.
    As a decorator, each call of the function runs in its own block (of an
    ``async def`` function: the whole coroutine, across its awaits), so a
    decorated function may run in several threads and tasks at once.
    """

    __slots__ = ()

    def __call__(self, fn: _F) -> _F:
        pairs = self.labels
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def coroutine_wrapper(*args: Any, **kwargs: Any) -> Any:
                with _core.labels(**pairs):
                    return await fn(*args, **kwargs)

            return coroutine_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _core.labels(**pairs):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def current_labels() -> Dict[str, str]:
    """The labels in effect in the calling context (thread, asyncio task)."""
    return {k: v for k, v in _core.thread_labels() if k not in INTERNAL_LABELS}
