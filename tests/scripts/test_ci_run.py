""".ci/run, the README's test command: its two lanes hold every nox session once, frameworks_e2e
starts only after the four framework sessions it runs in, and a failed session on either lane
fails the run. The lanes run a stand-in for nox (NOX, a script that records its sessions and
fails the ones it is told to) in a copy of .ci/run: running the real sessions takes an hour."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

FAKE_NOX = """
import os, sys, time
sessions = sys.argv[sys.argv.index("-s") + 1:]
with open(os.environ["CALLS"], "a") as calls:
    calls.write(f"start {' '.join(sessions)}\\n")
if "verl" in sessions:
    time.sleep(2)  # lane 2's first sessions end before lane 1's: frameworks_e2e must wait
failing = set(os.environ.get("FAIL", "").split())
with open(os.environ["CALLS"], "a") as calls:
    calls.write(f"end {' '.join(sessions)}\\n")
print("nox ran", *sessions)
sys.exit(1 if failing & set(sessions) else 0)
"""


def nox_sessions() -> set[str]:
    """The functions of noxfile.py decorated by ``@session`` or ``@session(...)``."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Name) and target.id == "session":
                    names.add(node.name)
    return names


def lanes() -> dict[str, list[str]]:
    """lane label -> its sessions in order, from ``.ci/run --dry-run``."""
    out = subprocess.run(["bash", str(ROOT / ".ci" / "run"), "--dry-run"], capture_output=True, text=True, check=True)
    plan = {}
    for line in out.stdout.splitlines():
        label, _, rest = line.partition(": ")
        first, _, then = rest.partition(", then ")
        then = re.sub(r"^\(after lane 1's [^)]*\) ", "", then)
        plan[label] = first.split() + then.split()
    return plan


def test_the_lanes_hold_every_session_once():
    plan = lanes()
    listed = [name for sessions in plan.values() for name in sessions]
    assert sorted(listed) == sorted(nox_sessions())
    assert len(listed) == len(set(listed)) == 15


def test_each_end_to_end_session_follows_the_session_whose_virtualenv_it_runs_in():
    plan = lanes()
    for lane in plan.values():
        for e2e, venv in (("verl_e2e", "verl"), ("openrlhf_e2e", "openrlhf"), ("skyrl_e2e", "skyrl")):
            if e2e in lane:
                assert venv in lane and lane.index(venv) < lane.index(e2e)
    lane2 = plan["lane 2"]
    assert lane2.index("frameworks_e2e") > max(lane2.index(name) for name in ("trl", "openrlhf", "skyrl"))
    assert "verl" in plan["lane 1"]  # frameworks_e2e also waits for lane 1's verl sessions (next test)


def run_ci(tmp_path: pathlib.Path, fail: str = "") -> tuple[subprocess.CompletedProcess, list[str]]:
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    fake = tmp_path / "fake_nox.py"
    fake.write_text(FAKE_NOX)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "NOX": f"{sys.executable} {fake}", "CALLS": str(calls), "FAIL": fail}
    result = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=120
    )
    return result, calls.read_text().splitlines()


def test_frameworks_e2e_starts_after_lane_1s_verl_sessions_end(tmp_path):
    result, calls = run_ci(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert calls.index("end verl verl_e2e") < calls.index("start frameworks_e2e lint")
    assert calls.index("end trl openrlhf skyrl openrlhf_e2e skyrl_e2e") < calls.index("start frameworks_e2e lint")
    assert "nox ran core kernels skyrl04 compare_tests dist compare" in result.stdout  # lane 1's log printed


@pytest.mark.parametrize("failing", ["verl_e2e", "dist", "openrlhf", "lint"])
def test_a_failed_session_on_either_lane_fails_the_run(tmp_path, failing):
    result, calls = run_ci(tmp_path, fail=failing)
    assert result.returncode != 0
    assert len(calls) == 8  # every session still ran
    assert "nox ran verl verl_e2e" in result.stdout
