"""``gmpo-plugins frameworks``' TRL translation against TRL 1.16: the keywords build a
``GRPOConfig``, the adapter reads the spec's loss hyper-parameters back from it, and the
generated ``train_trl.py`` refuses a prompt over max_prompt_length (test_frameworks_run.py
runs it on the example spec through the command)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trl import GRPOConfig

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.trl.options import loss_hparams_from_args
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.spec import load_spec
from gmpo_plugins.frameworks.translate import trl as translator
from tests import run_specs
from tests.example_runs import example_in

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "frameworks"


def spec_in(tmp_path, **values):
    """The spec's own batch defaults, in mini-batches of 8."""
    return run_specs.spec_in(tmp_path, batches={"mini_batch_size": 8}, **values)


@pytest.mark.parametrize(
    "values",
    [
        {"loss_hparams": {"eps_low": 0.3, "eps_high": 0.5}},
        {"kl_coef": 0.05, "kl_estimator": "k1", "loss_hparams": {"log_ratio_bound": 10.0}},
        {"loss": "dr_grpo", "max_response_length": 64, "loss_hparams": {"norm_length": 64}},
        {"loss": "grpo", "optimizer": "sgd", "dtype": "float32", "advantage_std_norm": False},
        {"loss": "grpo", "loss_hparams": {"dual_clip": 3.0}},  # the dual clip in GMPO_PLUGINS_LOSS_HPARAMS
        {"loss": "dapo"},
    ],
)
def test_the_keywords_build_a_grpo_config_that_the_adapter_reads_back(tmp_path, monkeypatch, values):
    spec = spec_in(tmp_path, **values)
    config = translator.grpo_config(spec)
    config["output_dir"] = str(tmp_path / "out")
    config["use_cpu"] = True  # bf16 on this machine's CPU; the translation targets the GPU a run has
    args = GRPOConfig(**config)
    # 8 prompts * 4 rollouts = 32 responses per step: 4 optimiser steps of 8, each 2 micro-batches of 4
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.steps_per_generation) == (4, 2, 8)
    assert args.generation_batch_size == 32 and args.num_generations == 4
    assert args.max_steps == 1 * 4 * 1  # steps * optimiser steps per step * epochs
    loss = get_loss(spec.loss)
    # the rest arrives in the launch's GMPO_PLUGINS_LOSS_HPARAMS
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    for key, value in translator.translate(spec).env.items():
        monkeypatch.setenv(key, value)
    got = loss_hparams_from_args(args, loss)
    wanted = {"entropy_coef": 0.0, "top_entropy_quantile": 1.0, **spec.resolved_hparams()}  # GRPOConfig's terms, off
    if "kl_beta" in loss.defaults:
        wanted.update(kl_beta=spec.kl_coef, kl_estimator=spec.kl_estimator)
    if wanted.get("reduction") != "seq-mean-token-sum-norm":  # the constant length is unused
        got.pop("norm_length", None)
        wanted.pop("norm_length", None)
    assert got == {key: wanted[key] for key in got}
    assert all(wanted[key] == loss.defaults[key] for key in wanted if key not in got)


def run_script(launch, tmp_path):
    out = tmp_path / "out"
    launch = launch.with_out(str(out))
    out.mkdir()
    (out / "train_trl.py").write_text(launch.files["train_trl.py"])
    env = {**os.environ, **launch.env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return out, subprocess.run(
        [sys.executable, str(out / "train_trl.py")], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )


def test_the_generated_script_refuses_a_prompt_longer_than_max_prompt_length(tmp_path):
    # "<|im_start|> user \n add 0 and 1 <|im_end|> \n <|im_start|> assistant \n" is 12 tokens > 4
    spec = load_spec(example_in(tmp_path, **{"max_prompt_length = 32": "max_prompt_length = 4"}))
    _, result = run_script(translator.translate(spec), tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == "max_prompt_length: prompt 0 has 12 tokens, more than 4"
