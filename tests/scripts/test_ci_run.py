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


def noxfile() -> ast.Module:
    return ast.parse((ROOT / "noxfile.py").read_text())


def nox_sessions() -> set[str]:
    """The functions of noxfile.py decorated by ``@session`` or ``@session(...)``."""
    tree = noxfile()
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Name) and target.id == "session":
                    names.add(node.name)
    return names


def lane_parts() -> dict[str, tuple[list[str], list[str]]]:
    """lane label -> (its first sessions, the sessions after them), from ``.ci/run --dry-run``."""
    out = subprocess.run(["bash", str(ROOT / ".ci" / "run"), "--dry-run"], capture_output=True, text=True, check=True)
    plan = {}
    for line in out.stdout.splitlines():
        label, _, rest = line.partition(": ")
        first, _, then = rest.partition(", then ")
        then = re.sub(r"^\(after lane 1's [^)]*\) ", "", then)
        plan[label] = (first.split(), then.split())
    return plan


def lanes() -> dict[str, list[str]]:
    """lane label -> its sessions in order."""
    return {label: first + then for label, (first, then) in lane_parts().items()}


def kept_virtualenvs() -> dict[str, set[str]]:
    """Session -> the sessions whose virtualenv it runs in, read from noxfile.py: the names given to
    ``kept_python`` in its body or in the ``run_*`` helper it calls, and FRAMEWORK_SESSIONS's
    sessions for ``kept_python(session, venv)`` over that table."""
    tree = noxfile()
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    (table,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FRAMEWORK_SESSIONS"
    ]

    def kept(function: ast.FunctionDef) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(function):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id == "kept_python":
                venv = node.args[1]
                names |= {venv.value} if isinstance(venv, ast.Constant) else set(table.values())
            elif node.func.id.startswith("run_") and node.func.id in functions:
                names |= kept(functions[node.func.id])
        return names

    return {name: kept(functions[name]) for name in nox_sessions() if kept(functions[name])}


def test_the_lanes_hold_every_session_once():
    plan = lanes()
    listed = [name for sessions in plan.values() for name in sessions]
    assert sorted(listed) == sorted(nox_sessions())
    assert len(listed) == len(set(listed)) == 21


def test_each_end_to_end_session_follows_the_sessions_whose_virtualenvs_it_runs_in():
    plan = lanes()
    kept = kept_virtualenvs()
    assert set(kept) == {name for name in nox_sessions() if "_e2e" in name}
    for session, venvs in kept.items():
        lane = next(lane for lane in plan.values() if session in lane)
        for venv in venvs:
            if venv in lane:
                assert lane.index(venv) < lane.index(session)
            else:  # on lane 1: lane 2's sessions wait for lane 1's first sessions (next test)
                assert session in lane_parts()["lane 2"][1], (session, venv)
                assert venv in lane_parts()["lane 1"][0], (session, venv)


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


def test_frameworks_e2e_starts_after_lane_1s_first_sessions_end(tmp_path):
    result, calls = run_ci(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    then = "start frameworks_e2e frameworks_e2e_four lint"
    assert calls.index("end verl verl_e2e verl_e2e_losses verl_e2e_launch") < calls.index(then)
    first_of_lane_2 = "end trl openrlhf skyrl skyrl04 openrlhf_e2e openrlhf_e2e_invariance skyrl_e2e"
    assert calls.index(first_of_lane_2) < calls.index(then)
    assert "nox ran core kernels compare_tests dist compare trl114 verl08" in result.stdout  # lane 1's log printed


@pytest.mark.parametrize("failing", ["verl_e2e", "dist", "openrlhf", "lint"])
def test_a_failed_session_on_either_lane_fails_the_run(tmp_path, failing):
    result, calls = run_ci(tmp_path, fail=failing)
    assert result.returncode != 0
    assert len(calls) == 8  # every session still ran
    assert "nox ran verl verl_e2e verl_e2e_losses verl_e2e_launch" in result.stdout
