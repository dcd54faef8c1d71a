"""``gmpo-plugins frameworks``' verl translation composed with verl 0.9's own Hydra config
(ppo_trainer.yaml): every override names an existing key with the intended value, verl's
config validation accepts it, and the adapter reads the spec's loss hyper-parameters back."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.adapters.verl import check_policy_loss
from gmpo_plugins.adapters.verl.options import hparams_from_config
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.translate import verl as translator
from tests.run_specs import spec_in

from .engine import VERL_CONFIG_DIR


def composed(spec, out):
    launch = translator.translate(spec).with_out(str(out))
    overrides = list(launch.argv[3:])  # after python3 -m verl.trainer.main_ppo
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.mark.parametrize(
    ("values", "kl_type"),
    [
        ({"loss_hparams": {"eps_low": 0.3, "eps_high": 0.5}}, None),
        ({"kl_coef": 0.05, "kl_estimator": "k3", "optimizer": "sgd", "dtype": "float32"}, "low_var_kl"),
        ({"loss": "grpo", "loss_hparams": {"dual_clip": 3.0, "reduction": "token-mean"}}, None),
        ({"loss": "grpo"}, None),  # no dual clip: {"dual_clip": null} in GMPO_PLUGINS_LOSS_HPARAMS
        ({"loss": "dapo"}, None),
    ],
)
def test_the_overrides_compose_and_validate_with_verls_config(tmp_path, monkeypatch, values, kl_type):
    spec = spec_in(tmp_path, **values)
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    for key, value in translator.translate(spec).env.items():  # what the launch's environment gives the adapter
        if key == OVERRIDE_ENV:
            monkeypatch.setenv(key, value)
    config = composed(spec, tmp_path / "out")
    actor = config.actor_rollout_ref.actor
    # 8 responses per mini-batch / 4 rollouts per prompt = 2 prompts, verl's unit
    assert (actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu, actor.ppo_epochs) == (2, 2, 2)
    assert (config.data.train_batch_size, config.actor_rollout_ref.rollout.n) == (4, 4)
    assert config.trainer.total_training_steps == 5 and config.data.seed == 7
    assert config.algorithm.norm_adv_by_std_in_grpo is True and config.algorithm.adv_estimator == "grpo"
    assert config.reward.custom_reward_function.path == f"{tmp_path}/out/reward.py"
    assert actor.optim.optimizer == ("SGD" if spec.optimizer == "sgd" else "AdamW")
    assert actor.optim.lr == spec.learning_rate and actor.optim.clip_grad == spec.max_grad_norm
    assert actor.use_kl_loss is (kl_type is not None)
    if kl_type is not None:
        assert (actor.kl_loss_type, actor.kl_loss_coef) == (kl_type, 0.05)
    dtype = {"bfloat16": "bf16", "float32": "fp32"}[spec.dtype]
    assert actor.fsdp_config.mixed_precision.param_dtype == dtype
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))

    actor_config = omega_conf_to_dataclass(actor)
    check_policy_loss(actor_config)
    loss = get_loss(spec.loss)
    expressed = hparams_from_config(loss, actor_config, actor_config.loss_agg_mode, actor.policy_loss.loss_mode)
    resolved = spec.resolved_hparams()
    assert expressed == {key: resolved[key] for key in expressed}
    assert all(resolved[key] == loss.defaults[key] for key in resolved if key not in expressed)
