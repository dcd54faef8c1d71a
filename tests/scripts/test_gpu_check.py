"""scripts/gpu_check.sh on a machine without a GPU: its argument handling, its clear
refusal without CUDA, and its dry run (which checks everything a real run needs short of
the GPU and prints the steps). The real run needs a CUDA machine (docs/performance.md)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def gpu_check(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_help_shows_usage_and_the_wheel_command():
    result = gpu_check("--help")
    assert result.returncode == 0
    assert "scripts/gpu_check.sh [--dry-run] [--wheels DIR] OUTDIR" in result.stdout
    assert "pip download --only-binary=:all: -d wheels -r scripts/gpu-check-requirements.txt" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "OUTDIR is required (the folder for the logs, bench JSON and Markdown)"),
        (("--bogus", "out"), "unknown option '--bogus'"),
        (("a", "b"), "one OUTDIR expected, got 'a' and 'b'"),
        (("--wheels",), "--wheels needs a directory"),
        (("--wheels", "/nonexistent-wheels", "out"), "--wheels: directory '/nonexistent-wheels' does not exist"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    result = gpu_check(*args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"gpu_check.sh: error: {message} (--help for usage)"]


def test_a_non_empty_outdir_is_refused_and_left_alone(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    result = gpu_check(str(tmp_path))
    assert result.returncode == 2 and "is not empty" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"] and (tmp_path / "mine.txt").read_text() == "keep"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_refuses_without_cuda_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = gpu_check(str(out))
    assert result.returncode == 3
    assert "no CUDA device (torch.cuda.is_available() is False)" in result.stderr
    assert f"torch {torch.__version__}" in result.stdout
    assert not out.exists()


def test_dry_run_prints_the_steps_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = gpu_check("--dry-run", "--wheels", str(tmp_path), str(out))
    assert result.returncode == 0, result.stderr
    assert "dry run: nothing is installed, run or written" in result.stdout
    assert "use the installed test dependencies (all import)" in result.stdout  # this venv has them
    assert "-k 'cuda or triton' (TRITON_INTERPRET unset)" in result.stdout
    assert f"bench --device cuda --repeats 20 --json {out}/bench-cuda.json --markdown > {out}/bench-cuda.md" in (
        result.stdout
    )
    assert (
        "bench --fused-linear 32768x4096,151936x4096 --fused-tokens 4x1024 --device cuda --repeats 5 "
        f"--json {out}/bench-fused-linear.json > {out}/bench-fused-linear.md"
    ) in result.stdout
    if not torch.cuda.is_available():
        assert "a real run would stop here, exit status 3" in result.stdout
    assert not out.exists()
