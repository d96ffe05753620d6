"""What every test of samprof.continuous shares: no SAMPROF_PUSH_* setting
from outside, and no agent left running after a test."""

from __future__ import annotations

import os

import pytest

from samprof import continuous


@pytest.fixture(autouse=True)
def no_push_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith(continuous.ENV_PREFIX):
            monkeypatch.delenv(name)
    yield
    agent = continuous.current()
    if agent is not None:
        agent.stop(timeout=1)
