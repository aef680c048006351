"""scripts/bad_input_driver.py, the driver that throws families of bad input at every command: its
verdicts are judged as the README's exit-status table says, its families cover every command, and
(slow) a whole run of it finds nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _driver():
    spec = importlib.util.spec_from_file_location("bad_input_driver", ROOT / "scripts" / "bad_input_driver.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bad_input_driver"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("ok, rc, stderr, wrote, verdict", [
    (False, 2, "scalebench simulate: error: cluster.gpus: got 3; allowed: ...\n", False, "one-line"),
    (False, 2, "scalebench simulate: error: cluster.gpus: got 3\n", True, "wrote"),
    (False, 2, "line one\nline two\n", False, "multi-line"),
    (False, 0, "", False, "accepted"),
    (False, 1, "scalebench run: 1 of 8 points failed ...\n", False, "failed"),
    (False, 1, "Traceback (most recent call last):\n  ...\nValueError: x\n", False, "traceback"),
    (False, -11, "", False, "traceback"),
    (False, 1, "MemoryError\n", False, "memory"),
    (True, 0, "", True, "ok"),
    (True, 2, "scalebench x: error: y\n", False, "one-line"),
])
def test_verdicts(ok, rc, stderr, wrote, verdict):
    driver = _driver()
    case = driver.Case("id", "family", ["simulate"], ok=ok)
    assert driver.judge(case, rc, stderr, wrote) == verdict


def test_the_families_cover_every_command_with_distinct_cases():
    from scalebench.cli import SUBCOMMANDS

    driver = _driver()
    cases = driver.all_cases()
    assert len(cases) >= 1500
    assert len({c.id for c in cases}) == len(cases)
    assert {c.command for c in cases} == set(SUBCOMMANDS)
    families = {c.family.split(":")[0] for c in cases}
    assert families == {"number", "name", "input", "output", "yaml", "section", "not-applying", "content"}


@pytest.mark.slow
def test_the_whole_driver_finds_nothing():
    """About 1,800 cases, 20-40 minutes on 2 cores: every one a one-line error, a failure said in
    one line, or (legitimate input) exit 0; no traceback, hang, memory blow-up or silent nonsense."""
    driver = _driver()
    assert driver.main(["-j", "2"]) == 0
