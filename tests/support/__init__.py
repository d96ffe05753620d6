"""What the tests share: one copy of each helper.

Tests import these as ``support.<module>``: tests/conftest.py puts tests/ on
sys.path, and ``processes.child_env`` puts it on a child's PYTHONPATH, so
the scripts in tests/scripts/ that tests run as child processes import them
the same way. Of the helper modules only ``profiles`` imports pytest, so
children can import the others.

Modules:
  httpclient   GET from the /debug/pprof endpoints (get), Go's error
               shape (assert_go_error), script_process (a bounded child
               script), serving_process (a process under load with
               samprof.serve on), capture_becomes_free.
  measure      retry-before-failing for the statistical tests (marker
               ``accuracy``): measure, within, within_ratio, at_least.
  native       tests/native/*.c compiled once per process (native_library);
               perf_available; GENERATED (code_churn.py's generated names).
  pprof_proto  an independent pprof decoder on google.protobuf, and
               ProfileBuilder, an encoder for profiles with known contents.
  processes    child processes, each bounded by a timeout: samprof_env,
               child_env, run_script, run_samprof, run_python, last_json,
               crash_report, describe.
  procfs       this process as /proc sees it: rss_kib, open_fds,
               native_threads, posix_timers.
  profiles     every profile a test makes, checked: check_profile, View,
               go_pprof, go_pprof_files, go_binary; reading reports:
               top_table, top_showing, parse_raw (go tool pprof -raw);
               cpu_profile, a CPU-shaped samprof.pprof Profile.
  workloads    CPU burners: spin_python, burn_python_for, hash_for,
               burn_cpu, and spin (for wall time).
  test_measure the tests of measure (collected with the rest of the suite).

Constants defined here:
  SANITIZED  the tests run against the ASan+UBSan build
             (SAMPROF_SANITIZED=1, set by `make test-sanitize`).
  TESTS, SCRIPTS, NATIVE  the paths of tests/, tests/scripts/ and
             tests/native/.
"""

from __future__ import annotations

import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(TESTS, "scripts")
NATIVE = os.path.join(TESTS, "native")

SANITIZED = os.environ.get("SAMPROF_SANITIZED") == "1"
