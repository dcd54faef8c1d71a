"""Complete ``trainer.train()`` runs with registry losses: real TRL generation, rewards,
advantages, num_iterations = 2 (so old log-probs differ from current ones on the second
pass), gradient accumulation 2, a reference model for the KL term, on CPU."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

from .tiny import count_digits_reward, grpo_config

LOSS_METRICS = (
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "policy_loss",
    "entropy",
    "seq_weight_mean",
)


@pytest.mark.parametrize(
    "loss,config",
    [
        ("gmpo", {"epsilon": 0.4, "beta": 0.04, "use_bias_correction_kl": False, "gradient_accumulation_steps": 2}),
        ("dapo", {"epsilon": 0.2, "epsilon_high": 0.28}),
    ],
)
def test_train_completes_and_updates_the_model(loss, config, model_dir, tmp_path, tokenizer, prompts):
    trainer = RegistryGRPOTrainer(  # GRPOTrainer's positional order is kept
        model_dir,
        count_digits_reward,
        grpo_config(tmp_path, max_steps=4, **config),
        prompts,
        processing_class=tokenizer,
        loss=loss,
    )
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()

    changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert len(changed) == len(before)  # every parameter moved

    steps = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(steps) == 4
    for entry in steps:
        for name in LOSS_METRICS + ("loss",) + (("kl",) if config.get("beta") else ()):
            assert math.isfinite(entry[name]), (name, entry)
    # the second pass over each generation batch (num_iterations = 2) is off-policy:
    # importance ratios differ from 1 and the log ratio is non-zero somewhere
    assert any(entry["seq_weight_min"] < 1.0 < entry["seq_weight_max"] for entry in steps)
    assert any(entry["log_ratio_max"] > 0.0 for entry in steps)
