"""Held-out evaluation: the task's fixed held-out prompts, which training never samples.

    heldout_greedy   exact-match rate of one greedy (argmax) completion per held-out prompt
    heldout_pass     mean reward of ``samples`` completions per prompt at temperature 1
                     (the sampled pass rate, pass@1 estimated from ``samples`` draws)

The sampling generator is seeded from the run's seed and the step, so an evaluation is a
pure function of (model, task, seed, step).
"""

from __future__ import annotations

import torch

from gmpo_plugins.compare.experiment.rollout import score_completions
from gmpo_plugins.compare.experiment.task import Task

EVAL_SAMPLES = 4


def evaluate_held_out(
    model, tokenizer, task: Task, *, seed: int, step: int, device: torch.device, samples: int = EVAL_SAMPLES
) -> dict[str, float]:
    """``{"heldout_greedy": ..., "heldout_pass": ...}`` of ``model`` on ``task.held_out()``."""
    problems = task.held_out()
    max_new_tokens = task.max_answer_tokens + 4
    was_training = model.training
    model.eval()
    greedy = score_completions(
        model,
        tokenizer,
        problems,
        max_new_tokens=max_new_tokens,
        generator=torch.Generator(device=device),
        device=device,
        temperature=0.0,
    )
    generator = torch.Generator(device=device).manual_seed(seed * 1_000_003 + step)
    sampled = score_completions(
        model,
        tokenizer,
        [p for p in problems for _ in range(samples)],
        max_new_tokens=max_new_tokens,
        generator=generator,
        device=device,
    )
    model.train(was_training)
    return {"heldout_greedy": float(greedy.rewards.mean()), "heldout_pass": float(sampled.rewards.mean())}
