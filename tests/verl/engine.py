"""Drive verl 0.9.1's own actor loss call site on CPU, as its FSDP engine does.

``verl.workers.utils.losses.ppo_loss`` is called once per micro-batch with a
``model_output`` built exactly like ``FSDPEngineWithLMHead.prepare_model_outputs``
(use_remove_padding): a jagged nested tensor (bsz, j1) of log-probs over each sequence's
prompt+response tokens, position k holding log p(token[k+1] | tokens[<=k]). CPU has no
flash-attn varlen kernel, so each sequence goes through the model alone (unpadded, its own
position_ids), which is what the packed varlen forward computes. Each micro-batch loss is
back-propagated unscaled (``FSDPEngine.forward_backward_batch``).

The rollout batch is verl's left/right padded layout (prompts left-padded, responses
right-padded), converted with verl's ``left_right_2_no_padding`` (as
``RayPPOTrainer._update_actor``); layout "nested" additionally makes the per-response
fields jagged (the v1 trainer), so the padded width T differs between micro-batches.
Non-tensor globals: ``dp_size``, ``batch_num_tokens`` (valid tokens of the global
mini-batch), ``global_batch_size`` (= ppo_mini_batch_size * rollout.n over all ranks).

Also here: the same log-probs computed without verl (``response_log_probs``), for the
core reference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import verl
from hydra import compose, initialize_config_dir
from tensordict import TensorDict
from transformers import Qwen2ForCausalLM
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.torch_functional import logprobs_from_logits
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding, response_to_nested

from tests.tiny_models import tiny_model

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
ACTOR = "actor_rollout_ref.actor"


def make_actor_config(loss_mode: str, **fields):
    """The actor dataclass (``FSDPActorConfig``) composed from verl's own Hydra defaults
    (ppo_trainer.yaml) with ``policy_loss.loss_mode`` and ``actor.<field>=<value>``
    overrides, validated by verl's ``__post_init__`` (e.g. loss_agg_mode)."""
    overrides = [
        f"{ACTOR}.policy_loss.loss_mode={loss_mode}",
        f"{ACTOR}.ppo_micro_batch_size_per_gpu=2",  # required when use_dynamic_bsz=False
        *(f"{ACTOR}.{key}={'null' if value is None else value}" for key, value in fields.items()),
    ]
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def make_model(seed: int = 0) -> Qwen2ForCausalLM:
    """A tiny randomly initialised Qwen2 (``tests.tiny_models``, vocab 64), float32, eager attention, train mode."""
    return tiny_model("qwen2", 64, seed=seed, attn_implementation="eager")


@dataclass
class Rollout:
    """One mini-batch in verl's padded layout plus the lengths the reference needs."""

    td: TensorDict
    prompt_lens: torch.Tensor  # (B,)
    resp_lens: torch.Tensor  # (B,)
    max_prompt: int

    def log_probs(self, model) -> torch.Tensor:
        """(B, R) response log-probs of ``model`` computed without verl (``response_log_probs``)."""
        return response_log_probs(model, self.td["input_ids"], self.max_prompt, self.prompt_lens, self.resp_lens)


def make_rollout(model, bsz: int = 8, max_prompt: int = 6, max_resp: int = 10, seed: int = 1, noise: float = 0.3):
    """Rollout batch: prompts 2..6 tokens, responses 1..10 tokens (row 0 is 10), old log-probs
    = current log-probs + N(0, noise) (ratios away from 1, some clipping), one N(0, 1)
    advantage per sequence broadcast over its response (GRPO-like, mixed signs)."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(2, max_prompt + 1, (bsz,), generator=g)
    resp_lens = torch.randint(1, max_resp + 1, (bsz,), generator=g)
    resp_lens[0] = max_resp
    prompts = torch.zeros(bsz, max_prompt, dtype=torch.long)
    responses = torch.zeros(bsz, max_resp, dtype=torch.long)
    attn = torch.zeros(bsz, max_prompt + max_resp, dtype=torch.long)
    for i in range(bsz):
        p, r = int(prompt_lens[i]), int(resp_lens[i])
        prompts[i, max_prompt - p :] = torch.randint(1, 64, (p,), generator=g)
        responses[i, :r] = torch.randint(1, 64, (r,), generator=g)
        attn[i, max_prompt - p : max_prompt + r] = 1
    input_ids = torch.cat([prompts, responses], dim=1)
    position_ids = torch.clamp(torch.cumsum(attn, dim=1) - 1, min=0)
    response_mask = attn[:, max_prompt:].clone()
    with torch.no_grad():
        current = response_log_probs(model, input_ids, max_prompt, prompt_lens, resp_lens)
    old_log_probs = (current + noise * torch.randn(current.shape, generator=g)) * response_mask
    advantages = torch.randn(bsz, generator=g)[:, None] * response_mask
    td = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": input_ids,
            "attention_mask": attn,
            "position_ids": position_ids,
            "response_mask": response_mask,
            "old_log_probs": old_log_probs,
            "advantages": advantages,
        },
        batch_size=[bsz],
    )
    return Rollout(td, prompt_lens, resp_lens, max_prompt)


def response_log_probs(model, input_ids, max_prompt: int, prompt_lens, resp_lens) -> torch.Tensor:
    """(B, R) response log-probs without verl: each sequence alone, plain log_softmax and
    gather, zero on padding (prompts left-padded to ``max_prompt``)."""
    max_resp = input_ids.shape[1] - max_prompt
    out = []
    for i in range(input_ids.shape[0]):
        p, r = int(prompt_lens[i]), int(resp_lens[i])
        ids = input_ids[i, max_prompt - p : max_prompt + r]
        logits = model(input_ids=ids[None], position_ids=torch.arange(p + r)[None], use_cache=False).logits[0]
        lp = torch.log_softmax(logits.float(), -1)[:-1].gather(-1, ids[1:, None])[:, 0]
        out.append(torch.nn.functional.pad(lp[p - 1 :], (0, max_resp - r)))
    return torch.stack(out)


def engine_batch(padded: TensorDict, layout: str = "padded", dp_size: int = 1, global_tokens=None, global_size=None):
    """What the actor worker's loss sees for one mini-batch ``padded`` (``Rollout.td``, or one
    dp rank's rows with ``global_tokens``/``global_size`` of the whole mini-batch), with the
    non-tensor globals as ints."""
    td = left_right_2_no_padding(padded.clone())
    if layout == "nested":
        lens = td["response_mask"].sum(1)
        ref = torch.nested.as_nested_tensor([torch.ones(int(n), dtype=torch.long) for n in lens], layout=torch.jagged)
        mask_nested = response_to_nested(td["response_mask"], ref)
        prompt_lens = td["attention_mask"][:, : td["prompts"].shape[1]].sum(1)
        td["prompts"] = torch.nested.as_nested_tensor(
            [p[p.shape[0] - int(n) :] for p, n in zip(td["prompts"], prompt_lens, strict=True)], layout=torch.jagged
        )
        for key in ("responses", "old_log_probs", "advantages", "rollout_is_weights"):
            if key in td.keys():
                td[key] = response_to_nested(td[key], mask_nested)
        td["response_mask"] = mask_nested
        td["loss_mask"] = mask_nested
        del td["attention_mask"]
        del td["max_response_len"]  # the v1 trainer never sets it: T = each micro-batch's longest response
    loss_mask = td["loss_mask"]
    local_tokens = int((loss_mask.values() if loss_mask.is_nested else loss_mask).sum())
    tu.assign_non_tensor(
        td,
        dp_size=dp_size,
        batch_num_tokens=local_tokens if global_tokens is None else global_tokens,
        global_batch_size=len(td) * dp_size if global_size is None else global_size,
    )
    return td


def forward(model, micro_batch: TensorDict) -> dict:
    """``model_output`` as the FSDP engine builds it (jagged log-probs over prompt+response)."""
    input_ids, position_ids = micro_batch["input_ids"], micro_batch["position_ids"]
    logits = [
        model(input_ids=ids[None], position_ids=pos[None], use_cache=False).logits[0]
        for ids, pos in zip(input_ids.unbind(), position_ids.unbind(), strict=True)
    ]
    labels = torch.roll(input_ids.values(), shifts=-1, dims=0)
    log_probs = logprobs_from_logits(logits=torch.cat(logits, 0), labels=labels)
    return {"log_probs": torch.nested.nested_tensor_from_jagged(log_probs, input_ids.offsets())}


@dataclass
class StepResult:
    """Summed micro-batch losses, the accumulated gradient, and each call's metrics."""

    loss: float
    grad: torch.Tensor
    metrics: list[dict]


def train_step(model, config, mini_batch: TensorDict, n_micro: int) -> StepResult:
    """Gradient accumulation over ``n_micro`` equal micro-batches (``tu.chunk_tensordict``,
    as ``prepare_micro_batches`` without dynamic bsz), each loss from verl's ``ppo_loss``."""
    model.zero_grad(set_to_none=True)
    total, metrics = 0.0, []
    for micro_batch in tu.chunk_tensordict(mini_batch, n_micro):
        loss, m = ppo_loss(config, forward(model, micro_batch), micro_batch, dp_group=None)
        loss.backward()
        total += loss.item()
        metrics.append(m)
    return StepResult(total, flat_grad(model), metrics)


def flat_grad(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
