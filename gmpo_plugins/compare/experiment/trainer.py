"""The RL loop of ``gmpo-plugins compare``: one (framework, loss) run, one record per step.

Per step (B = prompts_per_step * group_size sequences):

1. draw prompts (seeded), sample ``group_size`` completions each with the current
   policy (seeded), reward them, group-normalise the advantages (``rollout``);
2. with the current policy, no grad: ``old_log_probs`` (B, T) of the sampled tokens,
   the policy's entropy and its exact KL to the initial policy over the vocabulary,
   averaged over valid response tokens:

       entropy = mean_t  -sum_v p_t(v) log p_t(v)
       kl_init = mean_t   sum_v p_t(v) (log p_t(v) - log p0_t(v))       p0: initial policy

3. ``ppo_epochs`` passes over the batch, each shuffled (seeded) into ``mini_batches``
   mini-batches; every mini-batch is one optimizer step on the backend's loss with
   ``BatchInfo(dp_size=1, global_batch_size=rows, global_num_tokens=valid tokens)``.
   After the first update the ratios pi_theta / pi_old move off 1, so clipping acts.

Every ``eval_every`` steps, at the last step and once before the first (a record with
``step`` 0 and only the evaluation), the policy is evaluated on the task's held-out prompts
(``gmpo_plugins.compare.experiment.evaluate``): ``heldout_greedy`` and ``heldout_pass``.

Loss metrics are aggregated over the step's updates: ``*_min`` by min, ``*_max`` by max,
the others by mean. After the updates the trainer itself measures how far the policy moved
from the rollout policy (``post_*``, ``post_update_spread``), identically for every backend.
Every random draw uses its own generator seeded from ``seed``, so a run is a pure function
of (initial model, loss, backend, config); ``TIMING_KEYS`` are the only fields that vary
between two runs of it.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Generator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gmpo_plugins.compare.backends.base import LossBackend, PolicyLossCall
from gmpo_plugins.compare.experiment.evaluate import evaluate_held_out
from gmpo_plugins.compare.experiment.model import response_logits
from gmpo_plugins.compare.experiment.rollout import collect_rollout
from gmpo_plugins.compare.experiment.settings import resolve_loss
from gmpo_plugins.compare.experiment.task import Task
from gmpo_plugins.core.types import BatchInfo

TIMING_KEYS = ("elapsed_s",)


@dataclass(frozen=True)
class RLConfig:
    """Hyper-parameters of the RL run (defaults: the README's main job)."""

    steps: int = 40
    prompts_per_step: int = 8
    group_size: int = 8
    ppo_epochs: int = 2
    mini_batches: int = 4
    lr: float = 1.5e-4  # the default task's; compare uses the task's rl_lr unless --lr
    max_grad_norm: float = 1.0
    eval_every: int = 10
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def use_one_cpu_thread(device: torch.device) -> None:
    """On CPU run torch single-threaded unless OMP_NUM_THREADS says otherwise: the default
    model's matrices are tiny, so extra threads only add synchronisation, and on a busy
    machine (CI) oversubscribed OpenMP threads slow it down several-fold."""
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def gather_log_probs(log_softmax: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) log-probability of ``tokens`` (B, T) under ``log_softmax`` (B, T, V)."""
    return log_softmax.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def post_update_spread(log_ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Spread of log(pi_after / pi_old) (B, T) after a step's updates, measured by the
    trainer (the same way for every backend): 1st/99th percentile over valid tokens, and
    min/max over sequences of the weight exp(mean_t log ratio)."""
    valid = log_ratio[mask].double()
    quantiles = torch.quantile(valid, torch.tensor([0.01, 0.99], dtype=torch.float64, device=valid.device))
    seq_weight = torch.exp((log_ratio * mask).sum(-1) / mask.sum(-1).clamp_min(1))[mask.any(-1)]
    return {
        "post_log_ratio_q01": float(quantiles[0]),
        "post_log_ratio_q99": float(quantiles[1]),
        "post_seq_weight_min": float(seq_weight.min()),
        "post_seq_weight_max": float(seq_weight.max()),
    }


def length_spread(mask: torch.Tensor, group_size: int) -> dict[str, float]:
    """How response lengths |o| (from ``mask`` (B, T)) vary: ``group_len_range``, the mean over
    groups of (longest - shortest) within a group; ``group_len_spread``, the standard
    deviation (population) of the groups' mean lengths."""
    lengths = mask.sum(-1).double().view(-1, group_size)
    spread = lengths.mean(1).std(unbiased=False) if lengths.shape[0] > 1 else lengths.new_zeros(())
    return {
        "group_len_range": float((lengths.max(1).values - lengths.min(1).values).mean()),
        "group_len_spread": float(spread),
    }


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum() / mask.sum().clamp_min(1))


def _aggregate(metrics: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({key for m in metrics for key in m})
    out = {}
    for key in keys:
        values = [m[key] for m in metrics if key in m]
        if key.endswith("_min"):
            out[key] = min(values)
        elif key.endswith("_max"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out


def train(
    initial_model,
    tokenizer,
    task: Task,
    backend: LossBackend,
    loss_name: str,
    config: RLConfig,
    device: torch.device,
    *,
    framework: str | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Run ``config.steps`` RL steps from a copy of ``initial_model``; yield one record per step."""
    registry_loss, hparams = resolve_loss(loss_name)  # a registry loss, or a named setting of one
    reference = initial_model.to(device).eval()
    policy = copy.deepcopy(reference)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    prompt_generator = torch.Generator().manual_seed(config.seed)
    sample_generator = torch.Generator(device=device).manual_seed(config.seed + 1)
    shuffle_generator = torch.Generator().manual_seed(config.seed + 2)
    max_new_tokens = task.max_answer_tokens + 4
    start = time.perf_counter()
    identity = {"framework": framework or backend.name, "loss_name": loss_name, "seed": config.seed}
    yield {**identity, "step": 0, **evaluate_held_out(policy, tokenizer, task, seed=config.seed, step=0, device=device)}
    for step in range(1, config.steps + 1):
        policy.eval()
        problems = task.sample(config.prompts_per_step, prompt_generator)
        rollout = collect_rollout(
            policy,
            tokenizer,
            problems,
            group_size=config.group_size,
            max_new_tokens=max_new_tokens,
            generator=sample_generator,
            device=device,
        )
        ids, attn, plen = rollout.input_ids, rollout.attention_mask, rollout.prompt_len
        mask, tokens = rollout.response_mask, rollout.response_ids
        with torch.no_grad():
            log_p = torch.log_softmax(response_logits(policy, ids, attn, plen), dim=-1)
            log_p0 = torch.log_softmax(response_logits(reference, ids, attn, plen), dim=-1)
            old_log_probs = gather_log_probs(log_p, tokens)
            entropy = -(log_p.exp() * log_p).sum(-1)
            kl_init = (log_p.exp() * (log_p - log_p0)).sum(-1)

        policy.train()
        update_metrics = []
        rows = ids.shape[0]
        for _ in range(config.ppo_epochs):
            order = torch.randperm(rows, generator=shuffle_generator).to(device)
            for index in order.chunk(config.mini_batches):
                log_probs = gather_log_probs(
                    torch.log_softmax(response_logits(policy, ids[index], attn[index], plen), dim=-1), tokens[index]
                )
                loss, metrics = backend.policy_loss(
                    PolicyLossCall(
                        log_probs=log_probs,
                        old_log_probs=old_log_probs[index],
                        advantages=rollout.advantages[index],
                        mask=mask[index],
                        loss_name=registry_loss,
                        hparams=hparams,
                        batch_info=BatchInfo(
                            dp_size=1, global_batch_size=int(index.numel()), global_num_tokens=int(mask[index].sum())
                        ),
                    )
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
                optimizer.step()
                update_metrics.append(
                    {
                        "loss": float(loss.detach()),
                        "grad_norm": float(grad_norm),
                        **{k: float(v) for k, v in metrics.items()},
                    }
                )
        with torch.no_grad():
            policy.eval()
            new_log_probs = gather_log_probs(
                torch.log_softmax(response_logits(policy, ids, attn, plen), dim=-1), tokens
            )
            post = post_update_spread(new_log_probs - old_log_probs, mask)
        if step % config.eval_every == 0 or step == config.steps:
            post.update(evaluate_held_out(policy, tokenizer, task, seed=config.seed, step=step, device=device))
        record = {
            **identity,
            "step": step,
            "reward": float(rollout.rewards.mean()),
            "mixed_groups": float((rollout.advantages.view(-1, config.group_size) != 0).any(1).float().mean()),
            "response_len": float(mask.sum(-1).float().mean()),
            **length_spread(mask, config.group_size),
            "entropy": _masked_mean(entropy, mask),
            "kl_init": _masked_mean(kl_init, mask),
            **_aggregate(update_metrics),
            **post,
            "rollout_digest": rollout.digest(),
            "elapsed_s": time.perf_counter() - start,
        }
        yield record
