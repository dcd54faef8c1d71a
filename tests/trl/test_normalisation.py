"""Normalisation consistent with TRL's gradient accumulation and data parallelism.

``trl_batch_info`` turns (local sequences B, accumulation steps G, processes P,
num_items_in_batch, steps_per_generation) into ``BatchInfo``; summed over G micro-batches
and averaged over P processes, the gradient must equal that of the whole-batch mean
(sequence mean for gmpo/grpo/gspo, token mean for dapo), for any G and P."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.adapters.trl import RegistryGRPOTrainer, trl_batch_info

from .tiny import count_digits_reward, grpo_config, max_grad_difference, micro_batch, run_loss

TOTAL = 12


def _batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    shape = (TOTAL, 9)
    log_probs = (torch.randn(shape, generator=generator, dtype=torch.float64) - 2).requires_grad_()
    old = log_probs.detach() + 0.4 * torch.randn(shape, generator=generator, dtype=torch.float64)
    advantages = torch.randn(TOTAL, generator=generator, dtype=torch.float64)
    mask = torch.rand(shape, generator=generator) < 0.6
    mask[:, 0] = True
    return log_probs, old, advantages, mask


@pytest.mark.parametrize("name", ["gmpo", "grpo", "dapo", "gspo"])
@pytest.mark.parametrize("processes,accumulation", [(1, 1), (1, 3), (2, 1), (2, 3), (3, 2)])
def test_accumulated_data_parallel_gradient_equals_whole_batch(name, processes, accumulation):
    loss = get_loss(name)
    log_probs, old, advantages, mask = _batch()
    whole = loss(LossInputs(log_probs, old, advantages, mask), BatchInfo())  # whole-batch mean
    (expected,) = torch.autograd.grad(whole.loss, log_probs)

    local = TOTAL // (processes * accumulation)
    for shard in range(processes * accumulation):  # rank-major; every shard's grad lands in log_probs.grad
        rows = slice(shard * local, (shard + 1) * local)
        info = trl_batch_info(
            local_sequences=local,
            accumulation_steps=accumulation,
            num_processes=processes,
            num_items_in_batch=mask.sum(),  # the generation batch = this optimizer step, all ranks
            steps_per_generation=accumulation,
            training=True,
        )
        loss(LossInputs(log_probs[rows], old[rows], advantages[rows], mask[rows]), info).loss.backward()
    averaged = log_probs.grad / processes  # DDP averages the ranks' accumulated gradients
    assert torch.allclose(averaged, expected, rtol=0, atol=1e-14)


def test_eval_batch_info_has_no_accumulation():
    info = trl_batch_info(
        local_sequences=4,
        accumulation_steps=8,
        num_processes=2,
        num_items_in_batch=torch.tensor(40),
        steps_per_generation=8,
        training=False,
    )
    assert (info.dp_size, info.global_batch_size, int(info.global_num_tokens)) == (2, 8, 40)
    info = trl_batch_info(
        local_sequences=4,
        accumulation_steps=8,
        num_processes=2,
        num_items_in_batch=torch.tensor(40),
        steps_per_generation=4,
        training=True,
    )
    assert (info.dp_size, info.global_batch_size, int(info.global_num_tokens)) == (2, 64, 80)


@pytest.mark.parametrize("name", ["gmpo", "dapo"])
def test_trainer_two_micro_batches_equal_one(name, model_dir, tmp_path, tokenizer, prompts):
    """Through RegistryGRPOTrainer._compute_loss: one micro-batch of 6 with G = 1, or its two
    halves with G = 2 (gradients summed as the training loop does), give the same gradient."""
    trainer = RegistryGRPOTrainer(
        model=model_dir,
        reward_funcs=count_digits_reward,
        args=grpo_config(tmp_path, epsilon=0.3),
        train_dataset=prompts,
        processing_class=tokenizer,
        loss=name,
    )
    inputs = micro_batch(trainer, seed=8, batch=6, spread=0.4)
    whole_loss, whole_grads, _ = run_loss(trainer, inputs)

    trainer.args.steps_per_generation = 2  # the generation batch now spans two micro-batches
    summed, total_loss = None, 0.0
    for half in (slice(0, 3), slice(3, 6)):
        part = {key: (value[half] if key != "num_items_in_batch" else value) for key, value in inputs.items()}
        loss, grads, _ = run_loss(trainer, part, accumulation=2)
        total_loss += loss.item()
        summed = grads if summed is None else {k: summed[k] + grads[k] for k in grads}
    assert abs(total_loss - whole_loss.item()) <= 1e-6
    assert max_grad_difference(summed, whole_grads) <= 1e-6
    assert max(g.abs().max().item() for g in whole_grads.values()) > 1e-3  # a real gradient


def test_trainer_eval_loss_is_not_divided_by_accumulation(model_dir, tmp_path, tokenizer, prompts):
    trainer = RegistryGRPOTrainer(
        model=model_dir,
        reward_funcs=count_digits_reward,
        args=grpo_config(tmp_path, epsilon=0.3),
        train_dataset=prompts,
        processing_class=tokenizer,
        loss="gmpo",
    )
    inputs = micro_batch(trainer, seed=9, spread=0.4)
    train_loss = run_loss(trainer, inputs, accumulation=4)[0].item()
    trainer.model.eval()
    trainer.current_gradient_accumulation_steps = 4
    with torch.no_grad():
        eval_loss = trainer._compute_loss(trainer.model, inputs).item()
    assert abs(eval_loss - 4 * train_loss) <= 1e-6 and abs(eval_loss) > 1e-3
    assert trainer._metrics["eval"]["clip_ratio/region_mean"]
