"""The one door to samprof's compiled core, the ``samprof._samprof`` extension.

Every module that needs the C core imports it from here, and nothing else
imports the extension. The parts of samprof that only read, write or report
on profiles (``samprof.pprof``, ``samprof.report``, ``samprof top``) never
import this module, so they work on a machine that has profiles but no
compiled core: a laptop reading files pulled from production, a CI job
comparing two runs.

Importing this module without the extension raises one ImportError that
says what is missing and how to build it.
"""

from __future__ import annotations

try:
    from samprof._samprof import (
        HEAP_MAX_LIVE,
        HEAP_RATE,
        MAX_DEPTH,
        MAX_HZ,
        MAX_SAMPLES,
        ProfilerError,
        _after_fork_child,
        _arm_this_thread,
        _encode_synthetic,
        _heap_numpy_thread,
        _heap_thread_exiting,
        _thread_exiting,
        cut,
        gc_callback,
        heap_is_running,
        heap_snapshot,
        heap_start,
        heap_stop,
        is_running,
        labels,
        labels_in_samples,
        register_labelset,
        start,
        stop,
        thread_labels,
    )
except ImportError as e:
    raise ImportError(
        f"samprof's compiled core (samprof._samprof) cannot be imported: {e}. "
        "Profiling needs it; reading and reporting on profiles (samprof.pprof, "
        "samprof.report, `samprof top`) do not. Install samprof with pip "
        "(`pip install samprof`, or `pip install .` in a checkout), which builds "
        "the core; that needs a C compiler and the Python headers "
        "(Debian: apt-get install gcc python3-dev).",
        name="samprof._samprof",
    ) from e

__all__ = [
    "HEAP_MAX_LIVE",
    "HEAP_RATE",
    "MAX_DEPTH",
    "MAX_HZ",
    "MAX_SAMPLES",
    "ProfilerError",
    "_after_fork_child",
    "_arm_this_thread",
    "_encode_synthetic",
    "_heap_numpy_thread",
    "_heap_thread_exiting",
    "_thread_exiting",
    "cut",
    "gc_callback",
    "heap_is_running",
    "heap_snapshot",
    "heap_start",
    "heap_stop",
    "is_running",
    "labels",
    "labels_in_samples",
    "register_labelset",
    "start",
    "stop",
    "thread_labels",
]
