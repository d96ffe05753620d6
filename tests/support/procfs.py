"""This process as /proc sees it (Linux)."""

from __future__ import annotations

import os


def rss_kib() -> int:
    """Resident set size of this process, KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def posix_timers() -> int:
    """POSIX timers this process holds (/proc/self/timers lists them)."""
    try:
        with open("/proc/self/timers") as f:
            return sum(1 for line in f if line.startswith("ID:"))
    except OSError:
        return 0
