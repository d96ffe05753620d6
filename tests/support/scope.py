"""Which tests run on which Python.

The C core and everything that meets the interpreter (frame walking, the
GIL, threads, signals, fork, asyncio, tracing) is tested on every supported
Python. Tests of Python-level code that reads and serves profiles (the
views and their pages, the pprof reader and tools, the HTTP endpoints, the
push agent, the DBGP servers) are marked ``bounds``: they run on the oldest
and the newest Python, where a change in the language or the standard
library shows first, and not on the ones between nor under the sanitizers,
where they would run no C code of samprof's that the other tests do not.

Environment:
  SAMPROF_SCOPE=core   skip the tests marked ``bounds`` (CI on 3.10-3.12
                       and the sanitizer build); default all.
"""

from __future__ import annotations

import os

CORE_ONLY = os.environ.get("SAMPROF_SCOPE", "all") == "core"
