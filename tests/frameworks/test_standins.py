"""How an OpenRLHF launch is placed on this machine (``standins.local_launch``) with the GPU count
stubbed: the stand-ins' PYTHONPATH, environment and arguments without a GPU, the plain launch with
one, and the refusals (fp32 on a GPU, no checkout without one)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gmpo_plugins.frameworks import standins
from gmpo_plugins.frameworks.spec import load_spec
from gmpo_plugins.frameworks.translate import openrlhf as openrlhf_translator

PYTHON = "/venvs/openrlhf/bin/python"


@pytest.fixture
def placed(monkeypatch, tmp_path):
    """``placed(gpus, **spec values)``: the OpenRLHF launch of the spec, filled with ``tmp_path/run``,
    as ``local_launch`` places it for an interpreter that sees ``gpus`` GPUs (its Ray folder removed)."""
    made = []

    def place(write_spec, gpus: int, optimiser_steps: int = 1, **values) -> standins.LocalLaunch:
        monkeypatch.setattr(standins, "gpu_count", lambda python: gpus)
        launch = openrlhf_translator.translate(load_spec(write_spec(**values))).with_out(str(tmp_path / "run"))
        local = standins.local_launch(launch, PYTHON, tmp_path / "run", optimiser_steps)
        made.append(local.ray_dir)
        return local

    yield place
    for ray_dir in made:
        shutil.rmtree(ray_dir, ignore_errors=True)


def arguments(argv) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for arg in argv[3:]:
        if arg.startswith("--"):
            found[arg] = []  # a later flag replaces an earlier one, as argparse keeps the last
            current = arg
        else:
            found[current].append(arg)
    return found


def test_without_a_gpu_openrlhf_runs_on_the_checkouts_standins(placed, write_spec, tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    local = placed(write_spec, 0, dtype="float32")
    argv, env = local.launch.argv, local.launch.env
    assert argv[:3] == ("python3", "-m", "gmpo_plugins.adapters.openrlhf.cli")
    got = arguments(argv)
    assert got["--ds.param_dtype"] == ["fp32"] and got["--ds.attn_implementation"] == ["sdpa"]
    assert got["--vllm.num_engines"] == ["1"] and got["--actor.num_gpus_per_node"] == ["1"]
    assert local.standins.startswith("examples/openrlhf_cpu")
    assert [Path(p).relative_to(standins.EXAMPLES).as_posix() for p in local.pythonpath] == [
        "openrlhf_cpu/standins",
        "openrlhf_cpu/shims",
    ]
    ray = json.loads(env["OPENRLHF_E2E_RAY"])
    assert ray == {"num_cpus": 6, "num_gpus": 3, "temp_dir": local.ray_dir} and env["RAY_TMPDIR"] == local.ray_dir
    assert Path(local.ray_dir).is_dir() and Path(local.ray_dir).name.startswith(standins.RAY_DIR_PREFIX)
    assert env["OPENRLHF_E2E_RECORD_DIR"] == str(tmp_path / "run" / "record")
    assert local.first_update == str(tmp_path / "run" / "record" / "engine_weights_1.pt")
    assert env["TORCHDYNAMO_DISABLE"] == "1" and env["PATH"].startswith("/venvs/openrlhf/bin:")
    assert "TORCH_EXTENSIONS_DIR" not in env  # /venvs cannot be written here: torch's own cache folder


def test_the_standins_save_the_parameters_after_each_optimiser_step_of_rl_step_one(placed, write_spec, tmp_path):
    local = placed(write_spec, 0, 3, dtype="float32")
    folder = tmp_path / "run" / "optimiser_steps"
    assert local.launch.env["GMPO_CPU_STEP_PARAMS"] == str(folder) and local.launch.env["GMPO_CPU_STEP_COUNT"] == "3"
    assert local.step_params == tuple(str(folder / f"step_{k}.pt") for k in (1, 2, 3))


def test_torch_extensions_in_the_environment_are_inherited(placed, write_spec, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/cache/torch_extensions")
    assert "TORCH_EXTENSIONS_DIR" not in placed(write_spec, 0).launch.env


def test_with_a_gpu_openrlhf_runs_as_translated_with_one_engine_and_rank(placed, write_spec):
    local = placed(write_spec, 1)
    got = arguments(local.launch.argv)
    assert local.standins == "" and local.pythonpath == ()
    assert got["--vllm.num_engines"] == ["1"] and got["--ref.num_gpus_per_node"] == ["1"]
    assert "--ds.attn_implementation" not in got and got["--ds.param_dtype"] == ["bf16"]
    assert set(local.launch.env) == {"RAY_TMPDIR"}  # no stand-in saves steps
    assert local.step_params == ()


def test_fp32_on_a_gpu_is_refused(placed, write_spec):
    with pytest.raises(standins.StandinsError) as caught:
        placed(write_spec, 2, dtype="float32")
    assert str(caught.value).startswith("openrlhf: dtype float32 (--ds.param_dtype fp32) runs only with the CPU")


def test_without_a_gpu_or_a_checkout_openrlhf_is_refused(placed, write_spec, monkeypatch, tmp_path):
    monkeypatch.setattr(standins, "EXAMPLES", tmp_path / "no-examples")
    with pytest.raises(standins.StandinsError) as caught:
        placed(write_spec, 0)
    assert str(caught.value).startswith(f"openrlhf: no GPU for {PYTHON}, and the CPU stand-ins")


@pytest.fixture
def skyrl_placed(monkeypatch, tmp_path, write_spec):
    """``skyrl_placed(gpus)``: the SkyRL launch of a float32 spec, filled with ``tmp_path/run``, as
    ``local_launch`` places it for an interpreter that sees ``gpus`` GPUs (its Ray folder removed)."""
    from gmpo_plugins.frameworks.translate import skyrl as skyrl_translator

    made = []

    def place(gpus: int) -> tuple[standins.LocalLaunch, tuple[str, ...]]:
        monkeypatch.setattr(standins, "gpu_count", lambda python: gpus)
        spec = load_spec(write_spec(dtype="float32"))
        launch = skyrl_translator.translate(spec).with_out(str(tmp_path / "run"))
        local = standins.local_launch(launch, "/venvs/skyrl/bin/python", tmp_path / "run")
        made.append(local.ray_dir)
        return local, launch.argv

    yield place
    for ray_dir in made:
        if ray_dir is not None:
            shutil.rmtree(ray_dir, ignore_errors=True)


def test_without_a_gpu_skyrl_runs_its_trainer_on_the_checkouts_standins(skyrl_placed, tmp_path):
    local, translated = skyrl_placed(0)
    run = tmp_path / "run"
    assert translated[:2] == ("python3", f"{run}/skyrl_main.py")
    argv = local.launch.argv
    options = ("--out", str(run), "--save-params", "--reward", f"{run}/skyrl_main.py:_reward")
    assert argv[:8] == ("python3", "-m", "skyrl_cpu", *options)
    # SkyRL's own overrides as translated, then the CPU ones (later overrides win)
    assert argv[8 : 8 + len(translated) - 2] == translated[2:]
    assert argv[8 + len(translated) - 2 :] == standins.SKYRL_CPU_OVERRIDES
    assert "trainer.flash_attn=false" in argv and "trainer.policy.fsdp_config.mixed_precision.param_dtype=fp32" in argv
    assert local.standins.startswith("examples/skyrl_cpu")
    assert [Path(p).relative_to(standins.EXAMPLES).as_posix() for p in local.pythonpath] == [".", "skyrl_cpu/shims"]
    assert local.first_update == str(run / "params_step1.pt")
    assert local.step_params == (str(run / "optimiser_steps" / "step_1.pt"),)
    assert local.launch.env["GMPO_CPU_STEP_COUNT"] == "1"
    assert local.launch.env["RAY_TMPDIR"] == local.ray_dir and Path(local.ray_dir).is_dir()


def test_with_a_gpu_skyrl_runs_as_translated(skyrl_placed):
    local, translated = skyrl_placed(1)
    assert local.launch.argv == translated and local.standins == "" and local.first_update == ""


def test_without_a_gpu_or_a_checkout_skyrl_is_refused(skyrl_placed, monkeypatch, tmp_path):
    monkeypatch.setattr(standins, "EXAMPLES", tmp_path / "nowhere")
    with pytest.raises(standins.StandinsError, match=r"^skyrl: no GPU for /venvs/skyrl/bin/python, and the CPU"):
        skyrl_placed(0)
