"""Type stubs for samprof's C core. Use the classes in samprof instead."""

from typing import Any, Dict, Tuple

MAX_SAMPLES: int
MAX_HZ: int
MAX_DEPTH: int
HEAP_RATE: int
HEAP_MAX_LIVE: int

class ProfilerError(RuntimeError): ...

def start(
    mode: str,
    hz: int,
    engine: str,
    signum: int,
    max_depth: int,
    hidden_files: Tuple[str, ...],
    max_stacks: int = ...,
    by_thread: bool = ...,
) -> None:
    """Start a CPU ("cpu") or wall-clock ("wall") profile."""

def stop() -> Tuple[bytes, Dict[str, Any]]:
    """Stop; return (uncompressed pprof bytes, stats dict)."""

def cut(cpu_part: bool = ..., thread_labels: bool = ...) -> Tuple[Any, ...]:
    """(uncompressed pprof bytes, stats dict[, on-CPU part's bytes]) since
    start or the last cut; sampling goes on."""

def is_running() -> bool: ...
def register_labelset(pairs: Tuple[Tuple[str, str], ...]) -> int: ...
def set_thread_labels(labelset_id: int) -> int:
    """Set the calling thread's label-set id; return the previous one."""

def thread_labels() -> Tuple[Tuple[str, str], ...]: ...
def gc_callback(phase: str, info: Dict[str, Any]) -> None: ...
def _after_fork_child() -> None: ...
def _arm_this_thread() -> None: ...
def _thread_exiting() -> None: ...
def _encode_synthetic(n: int, depth: int) -> Tuple[bytes, float]: ...
def heap_start(
    rate: int,
    max_depth: int,
    max_live: int,
    hidden_files: Tuple[str, ...],
    max_stacks: int,
    numpy_api: object,
) -> None:
    """Start the heap profile; numpy_api is numpy's _ARRAY_API capsule or None."""

def heap_snapshot(allocs: bool) -> Tuple[bytes, Dict[str, Any]]: ...
def heap_stop(allocs: bool) -> Tuple[Tuple[bytes, Dict[str, Any]], int]:
    """Stop; return ((uncompressed pprof bytes, stats dict), hooks left)."""

def heap_is_running() -> bool: ...
def _heap_thread_exiting(name: str) -> None: ...
def _heap_numpy_thread() -> None: ...

class labels:
    """Context manager: string labels on the samples taken inside."""

    def __init__(self, **kv: str) -> None: ...
    def __enter__(self) -> "labels": ...
    def __exit__(self, *exc: object) -> bool: ...
    @property
    def labels(self) -> Dict[str, str]: ...
