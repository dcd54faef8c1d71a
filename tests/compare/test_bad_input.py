"""Bad command-line input: one line on stderr, exit status 2, no traceback, nothing run."""

import pytest

from gmpo_plugins.cli.main import main


def run_error(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    return code, lines


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--losses", "gmpoo"], "did you mean 'gmpo'"),
        (["--losses", "gmpo,nope"], "unknown loss 'nope'"),
        (["--losses", ","], "--losses"),
        (["--frameworks", "jax"], "valid: core, verl, openrlhf, trl"),
        (["--steps", "0"], "--steps: expected an integer >= 1, got 0"),
        (["--steps", "-3"], "--steps"),
        (["--seeds", "0"], "--seeds: a count must be in [1, 1000], got 0"),
        (["--seeds", "5-2"], "--seeds: expected a count N >= 1"),
        (["--seeds", "two"], "--seeds: expected"),
        (["--seeds", "-1"], "--seeds: expected"),
        (["--seeds", "0-99999999999"], "b <= 2147483647"),
        (["--seed", str(2**64)], "--seed: expected"),
        (["--seed", "-1"], "--seed: expected"),
        (["--seed", "1", "--seeds", "3"], "not both"),
        (["--task", "sort"], "--task: unknown task 'sort'; valid: repeat, reverse"),
        (["--eval-every", "0"], "--eval-every"),
        (["--lr", "0"], "--lr"),
    ],
)
def test_bad_names_and_steps(capsys, tmp_path, args, expected):
    code, lines = run_error(capsys, "compare", "--out", str(tmp_path / "out"), *args)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("gmpo-plugins compare: error:"), lines
    assert expected in lines[0]
    assert not (tmp_path / "out").exists()  # rejected before anything is written


def test_framework_not_installed_points_to_nox(capsys, tmp_path, monkeypatch):
    import importlib.util

    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here")
    monkeypatch.chdir(tmp_path)  # no .nox/verl
    monkeypatch.delenv("GMPO_PLUGINS_PYTHON_VERL", raising=False)
    code, lines = run_error(capsys, "compare", "--frameworks", "core,verl", "--out", str(tmp_path / "out"))
    assert code == 2 and len(lines) == 1
    assert "python3 -m nox -r -s verl" in lines[0] and "GMPO_PLUGINS_PYTHON_VERL" in lines[0]


def test_python_env_var_must_be_an_interpreter(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_CORE", str(tmp_path / "missing-python"))
    code, lines = run_error(capsys, "compare", "--out", str(tmp_path / "out"))
    assert code == 2 and len(lines) == 1 and "GMPO_PLUGINS_PYTHON_CORE" in lines[0]


@pytest.mark.parametrize("kind", ["missing", "empty", "file"])
def test_unreadable_model(capsys, tmp_path, kind):
    path = tmp_path / "model"
    if kind == "empty":
        path.mkdir()
    elif kind == "file":
        path.write_text("not a model")
    code, lines = run_error(capsys, "compare", "--model", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("gmpo-plugins compare: error: --model:"), lines
    assert str(path) in lines[0]


def test_unwritable_out(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, lines = run_error(capsys, "compare", "--out", str(blocker / "report"))
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("gmpo-plugins compare: error: --out: cannot write"), lines


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is present")
def test_cuda_without_gpu(capsys, tmp_path):
    code, lines = run_error(capsys, "compare", "--device", "cuda", "--out", str(tmp_path / "out"))
    assert code == 2 and len(lines) == 1 and "--device: cuda requested" in lines[0]


def test_parity_unknown_loss(capsys):
    code, lines = run_error(capsys, "parity", "--losses", "gmpo,nope")
    assert code == 2 and len(lines) == 1 and "unknown loss 'nope'" in lines[0]
