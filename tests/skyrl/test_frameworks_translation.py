"""``gmpo-plugins frameworks``' SkyRL translation against skyrl 0.3.0: the overrides parse into
SkyRL's own ``SkyRLTrainConfig`` with the intended values, and the adapter reads the spec's loss
hyper-parameters back from the parsed ``trainer.algorithm``."""

from __future__ import annotations

import pytest
from skyrl.train.config import SkyRLTrainConfig

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.skyrl.options import hparams_from_config
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.translate import skyrl as translator
from tests.run_specs import spec_in


@pytest.mark.parametrize(
    "values",
    [
        {"loss_hparams": {"eps_low": 0.3, "eps_high": 0.5}},
        {"kl_coef": 0.05, "kl_estimator": "k2", "dtype": "float32", "advantage_std_norm": False},
        {"loss": "dr_grpo", "loss_hparams": {"norm_length": 64}},
        {"loss": "grpo", "loss_hparams": {"reduction": "token-mean"}},
        {"loss": "grpo", "loss_hparams": {"dual_clip": 3.0}},  # the dual clip in GMPO_PLUGINS_LOSS_HPARAMS
        {"loss": "dapo"},
    ],
)
def test_the_overrides_parse_into_skyrls_config(tmp_path, monkeypatch, values):
    spec = spec_in(tmp_path, **values)
    launch = translator.translate(spec).with_out(str(tmp_path / "out"))
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    for key, value in launch.env.items():  # what the launch's environment gives the adapter
        monkeypatch.setenv(key, value)
    cfg = SkyRLTrainConfig.from_cli_overrides(list(launch.argv[2:]))
    trainer, algorithm = cfg.trainer, cfg.trainer.algorithm
    # 4 prompts per step, 8 responses per mini-batch / 4 rollouts = 2 prompts: SkyRL counts prompts
    assert (trainer.train_batch_size, trainer.policy_mini_batch_size, cfg.generator.n_samples_per_prompt) == (4, 2, 4)
    assert (trainer.micro_train_batch_size_per_gpu, trainer.update_epochs_per_batch) == (2, 2)
    assert (trainer.max_training_steps, trainer.seed) == (5, 7)
    assert cfg.data.train_data == [f"{tmp_path}/out/train.parquet"]
    assert cfg.environment.env_class == "gmpo_plugins_reward"
    assert trainer.policy.optimizer_config.lr == spec.learning_rate
    assert trainer.policy.fsdp_config.mixed_precision.param_dtype == {"bfloat16": "bf16", "float32": "fp32"}[spec.dtype]
    assert algorithm.grpo_norm_by_std is spec.advantage_std_norm
    assert algorithm.use_kl_loss is (spec.kl_coef > 0)
    if spec.kl_coef > 0:
        assert (algorithm.kl_loss_coef, algorithm.kl_estimator_type) == (0.05, "k2")
    loss = get_loss(spec.loss)
    got = hparams_from_config(loss, algorithm, algorithm.policy_loss_type)
    wanted = spec.resolved_hparams()
    assert got == {key: wanted[key] for key in got}
    assert all(wanted[key] == loss.defaults[key] for key in wanted if key not in got)
