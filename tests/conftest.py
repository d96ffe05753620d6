"""Fixtures and hooks for the whole suite. The helpers tests share are in
the package tests/support/ (see its __init__)."""

from __future__ import annotations

import os
import sys

import pytest

# tests/ on sys.path, so that `import support` works from every folder.
sys.path.insert(0, os.path.dirname(__file__))

from support import measure, scope  # noqa: E402
from support.native import native_library  # noqa: E402


@pytest.fixture(scope="session")
def native_lib():
    """tests/native/burn.c compiled and loaded with ctypes: threads that
    Python never sees, and raw libc calls."""
    return native_library("burn.c")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "accuracy: compares measured shares or totals with truth (tests/support/measure.py); "
        "SAMPROF_ACCURACY=short runs each at half length",
    )
    config.addinivalue_line(
        "markers",
        "bounds: runs on the oldest and the newest Python only (tests/support/scope.py); "
        "SAMPROF_SCOPE=core skips it",
    )


def pytest_collection_modifyitems(config, items):
    if not scope.CORE_ONLY:
        return
    skip = pytest.mark.skip(
        reason="Python-level code: runs on the oldest and the newest Python (SAMPROF_SCOPE=core)"
    )
    for item in items:
        if item.get_closest_marker("bounds") is not None:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A test's missed measurements travel in its report, so that the summary
    # shows them even when the test ran in a pytest-xdist worker.
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and measure.RETRIED:
        report.user_properties.extend(("measure-retry", r) for r in measure.RETRIED)
        del measure.RETRIED[:]


def pytest_terminal_summary(terminalreporter):
    retried = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        for name, value in getattr(report, "user_properties", ())
        if name == "measure-retry"
    ]
    if not retried:
        return
    terminalreporter.section("measurements retried (tests/support/measure.py)")
    for test, attempt, scale, took, why in retried:
        terminalreporter.write_line(
            f"{test}: attempt {attempt} (x{scale:g}, {took:.1f}s) missed: {why[:300]}"
        )
