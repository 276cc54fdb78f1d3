"""Failpoints: a name kills the process there, NAME:sleep=SECONDS holds it there, anything else is refused with its name."""

import os
import subprocess
import sys

import pytest

from modelcd_assets.lib.operations.failpoints import ENV, POINTS, failpoint


def test_a_sleeping_failpoint_sleeps_only_at_its_point(monkeypatch):
    slept = []
    monkeypatch.setattr("modelcd_assets.lib.operations.failpoints.time.sleep", slept.append)
    monkeypatch.setenv(ENV, "between_compare_and_set:sleep=1.5")
    failpoint("after_tags")
    failpoint("between_compare_and_set")
    assert slept == [1.5]


@pytest.mark.parametrize("setting", ["nowhere", "after_tags:sleep", "after_tags:sleep=-1", "after_tags:nap=2", "after_tags:sleep=soon"])
def test_a_setting_that_names_no_point_or_action_is_refused(monkeypatch, setting):
    monkeypatch.setenv(ENV, setting)
    with pytest.raises(ValueError, match=rf"{ENV}="):
        failpoint("after_tags")


def test_an_unknown_point_in_the_code_is_refused():
    with pytest.raises(ValueError, match="unknown failpoint 'elsewhere'; known: " + ", ".join(POINTS)):
        failpoint("elsewhere")


def test_a_named_failpoint_kills_the_process():
    code = "from modelcd_assets.lib.operations.failpoints import failpoint; failpoint('after_alias'); print('survived')"
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, ENV: "after_alias"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9 and "survived" not in proc.stdout
