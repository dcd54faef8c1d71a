"""Our registry losses inside RegistryGRPOTrainer against TRL's own trainers, on identical
inputs: the same model weights, the same micro-batch (tokens, masks, advantages, old and
reference log-probs), so both compute the same per-token log-probs with TRL's code.

Where semantics coincide the loss, every parameter gradient and the clip/KL/entropy
metrics agree to 1e-6 (float32). Differences by design are pinned in
``test_trl_differences.py``."""

from __future__ import annotations

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.gmpo import GMPOConfig, GMPOTrainer

from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

from .tiny import count_digits_reward, grpo_config, max_grad_difference, micro_batch, run_loss

TOL = 1e-6
SHARED_METRICS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "entropy")


def _assert_same(ours, theirs, expected_metrics):
    (loss_a, grads_a, metrics_a), (loss_b, grads_b, metrics_b) = ours, theirs
    assert abs(loss_a.item() - loss_b.item()) <= TOL, (loss_a.item(), loss_b.item())
    assert max_grad_difference(grads_a, grads_b) <= TOL
    for name in expected_metrics:
        assert abs(metrics_a[name] - metrics_b[name]) <= TOL, (name, metrics_a[name], metrics_b[name])


@pytest.fixture(scope="module")
def gmpo_pair(model_dir, tmp_path_factory):
    """(ours, TRL's GMPOTrainer) with beta = 0.04 and asymmetric log-space eps."""
    from datasets import Dataset

    from .tiny import PROMPTS, build_tokenizer

    out = tmp_path_factory.mktemp("gmpo-pair")
    prompts, tokenizer = Dataset.from_dict({"prompt": PROMPTS * 2}), build_tokenizer()
    eps = dict(epsilon=0.3, epsilon_high=0.25, beta=0.04)
    theirs = GMPOTrainer(
        model=model_dir,
        reward_funcs=count_digits_reward,
        args=grpo_config(out / "theirs", GMPOConfig, **eps),
        train_dataset=prompts,
        processing_class=tokenizer,
    )
    ours = RegistryGRPOTrainer(
        model=model_dir,
        reward_funcs=count_digits_reward,
        args=grpo_config(out / "ours", GRPOConfig, use_bias_correction_kl=False, **eps),
        train_dataset=prompts,
        processing_class=tokenizer,
        loss="gmpo",
    )
    return ours, theirs


@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_gmpo_equals_trl_gmpo_trainer(gmpo_pair, seed, accumulation):
    ours, theirs = gmpo_pair
    inputs = micro_batch(ours, seed=seed, spread=0.35)
    result_ours = run_loss(ours, inputs, accumulation=accumulation)
    result_theirs = run_loss(theirs, inputs, accumulation=accumulation)
    _assert_same(result_ours, result_theirs, SHARED_METRICS + ("kl",))
    metrics = result_ours[2]
    # the comparison exercises both clip sides and the KL term
    assert metrics["clip_ratio/low_mean"] > 0 and metrics["clip_ratio/high_mean"] > 0
    assert metrics["kl"] > 0


def test_gmpo_parity_with_tool_mask(gmpo_pair):
    """tool_mask (multi-turn tool results) is removed from the loss as in TRL."""
    ours, theirs = gmpo_pair
    inputs = micro_batch(ours, seed=5, spread=0.35)
    tool_mask = torch.ones_like(inputs["completion_mask"])
    tool_mask[:, 1:3] = 0
    inputs["tool_mask"] = tool_mask
    _assert_same(run_loss(ours, inputs), run_loss(theirs, inputs), SHARED_METRICS + ("kl",))


@pytest.mark.parametrize("name", ["grpo", "dapo", "dr_grpo"])
def test_token_level_losses_equal_trl_grpo_trainer(name, model_dir, tmp_path, tokenizer, prompts):
    """Our grpo/dapo/dr_grpo against GRPOTrainer(loss_type=name): ratio-space eps, the
    token-mean (DAPO, num_items_in_batch), sequence-mean (GRPO) and constant-length
    (Dr.GRPO, max_completion_length) normalisations, KL, with accumulation 2."""
    config = dict(
        epsilon=0.2, epsilon_high=0.28, beta=0.04, use_bias_correction_kl=False, gradient_accumulation_steps=2
    )
    theirs = GRPOTrainer(
        model=model_dir,
        reward_funcs=count_digits_reward,
        args=grpo_config(tmp_path / "theirs", loss_type=name, **config),
        train_dataset=prompts,
        processing_class=tokenizer,
    )
    ours = RegistryGRPOTrainer(
        model=model_dir,
        reward_funcs=count_digits_reward,
        args=grpo_config(tmp_path / "ours", **config),
        train_dataset=prompts,
        processing_class=tokenizer,
        loss=name,
    )
    inputs = micro_batch(ours, seed=3, spread=0.4)
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum() * 2  # the generation batch spans 2 micro-batches
    result_ours = run_loss(ours, inputs, accumulation=2)
    _assert_same(result_ours, run_loss(theirs, inputs, accumulation=2), SHARED_METRICS + ("kl",))
    assert result_ours[2]["clip_ratio/region_mean"] > 0


@pytest.mark.parametrize(
    "mode,shape", [("token_truncate", "token"), ("token_mask", "token"), ("sequence_truncate", "sequence")]
)
def test_vllm_importance_sampling_equals_trl(mode, shape, model_dir, tmp_path, tokenizer, prompts):
    """TRL's vLLM IS ratio reaches the loss as rollout_is_weights: our dapo equals TRL's dapo
    with the same ``importance_sampling_ratio`` ((B, T) in token modes, (B, 1) in sequence modes)."""
    trainers = []
    for cls, folder in ((GRPOTrainer, "theirs"), (RegistryGRPOTrainer, "ours")):
        extra = {"loss": "dapo"} if cls is RegistryGRPOTrainer else {}
        trainer = cls(
            model=model_dir,
            reward_funcs=count_digits_reward,
            args=grpo_config(tmp_path / folder, epsilon=0.2, epsilon_high=0.28),
            train_dataset=prompts,
            processing_class=tokenizer,
            **extra,
        )
        # vLLM cannot run here; the flags are what _compute_loss reads
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
        trainer.vllm_importance_sampling_mode = mode
        trainers.append(trainer)
    theirs, ours = trainers
    inputs = micro_batch(ours, seed=4, spread=0.4)
    batch, length = inputs["completion_ids"].shape
    generator = torch.Generator().manual_seed(9)
    columns = length if shape == "token" else 1
    inputs["importance_sampling_ratio"] = 0.5 + torch.rand(batch, columns, generator=generator)
    result_ours = run_loss(ours, inputs)
    _assert_same(result_ours, run_loss(theirs, inputs), SHARED_METRICS)
    without = dict(inputs)
    del without["importance_sampling_ratio"]
    ours.use_vllm = False
    assert abs(run_loss(ours, without)[0].item() - result_ours[0].item()) > 1e-3  # the weights mattered


def test_moe_router_aux_loss_equals_trl(moe_model_dir, tmp_path, tokenizer, prompts):
    """On a Qwen2-MoE the router load-balancing loss is added as GRPOTrainer adds it."""
    trainers = []
    for cls, folder in ((GRPOTrainer, "theirs"), (RegistryGRPOTrainer, "ours")):
        extra = {"loss": "dapo"} if cls is RegistryGRPOTrainer else {}
        trainers.append(
            cls(
                model=moe_model_dir,
                reward_funcs=count_digits_reward,
                args=grpo_config(tmp_path / folder, epsilon=0.2, epsilon_high=0.28),
                train_dataset=prompts,
                processing_class=tokenizer,
                **extra,
            )
        )
    theirs, ours = trainers
    assert ours.aux_loss_enabled
    inputs = micro_batch(ours, seed=6, spread=0.4)
    result_ours = run_loss(ours, inputs, accumulation=2)
    _assert_same(result_ours, run_loss(theirs, inputs, accumulation=2), SHARED_METRICS + ("aux_loss",))
    assert result_ours[2]["aux_loss"] > 0
