"""A long-running child process (a server under test) whose stderr is read
as it comes, so that a test can wait for the lines that say where it
listens; bounded in time whatever happens."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from typing import Dict, Iterator, List, Optional

# Where gunicorn and uvicorn say they listen.
GUNICORN_LISTENING = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")
UVICORN_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


class Running:
    """A child process whose stderr lines are collected as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.stderr: List[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._changed:
                self.stderr.append(line)
                self._changed.notify_all()
        with self._changed:
            self.stderr.append("")  # the end
            self._changed.notify_all()

    def wait_for(self, pattern: "re.Pattern[str]", count: int = 1, timeout: float = 30) -> list:
        """The first `count` matches of pattern in stderr, waiting for them."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [m for m in map(pattern.search, self.stderr) if m]
                if len(found) >= count:
                    return found[:count]
                left = deadline - time.monotonic()
                assert left > 0 and self.stderr[-1:] != [""], (
                    f"wanted {count} lines like {pattern.pattern}:\n{''.join(self.stderr)}"
                )
                self._changed.wait(left)

    def finish(self, timeout: float = 30) -> int:
        """Waits for the process to exit (killing it after timeout) and
        returns its exit status."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"did not exit in {timeout} s:\n{''.join(self.stderr)}") from None
        finally:
            self._reader.join(timeout=5)


@contextlib.contextmanager
def running(args: List[str], cwd: str, env: Optional[Dict[str, str]] = None) -> Iterator[Running]:
    """Runs args; kills the process if it still runs when the block ends."""
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    r = Running(proc)
    try:
        yield r
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        r._reader.join(timeout=5)
