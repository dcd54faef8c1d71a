"""The policy model: a tiny transformers causal LM built from a config, its supervised
warm-up, loading a local model directory, and the one forward pass everything uses.

Default model: ``GPT2LMHeadModel`` with vocab 14 (the char tokenizer), hidden 64,
2 layers, 4 heads, MLP 256, learned absolute positions (which make reversal learnable in
a few hundred steps; a RoPE model of this size needs thousands), tied embeddings,
~0.1M parameters, initialised from a seed, no dropout.

Warm-up: Adam steps of teacher-forced cross-entropy on the task's answers (response
tokens only). Every ``warmup_check_every`` steps the sampled success rate is measured on
a fixed batch; warm-up stops at the first check where it reaches ``warmup_target``
(or after ``warmup_max_steps``), so the RL run starts neither at ~0 nor at ~1 and most
groups have mixed rewards.

Sequence layout shared by warm-up, rollout and training (B rows):

    input_ids       (B, P + T)  prompt left-padded to P, response right-padded to T
    attention_mask  (B, P + T)  1 on real tokens
    position_ids    0 .. P + T - 1 for every row: prompts are right-aligned, so "=" and the
                    first response token sit at the same position whatever the prompt length
    logits for response token t come from position P - 1 + t
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from gmpo_plugins.compare.experiment.encoding import encode_answers, encode_prompts
from gmpo_plugins.compare.experiment.rollout import collect_rollout
from gmpo_plugins.compare.experiment.task import Task


class ModelLoadError(Exception):
    """A --model directory that cannot be used."""


@dataclass(frozen=True)
class ModelConfig:
    """Size of the default model and its warm-up schedule."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 256
    max_positions: int = 64
    warmup_max_steps: int = 600
    warmup_batch: int = 64
    warmup_lr: float = 3e-3
    warmup_target: float = 0.2
    warmup_check_every: int = 10
    warmup_check_prompts: int = 16
    warmup_check_group: int = 4


@dataclass
class WarmupResult:
    """How the warm-up ended: steps taken, last loss, success rate at the last check."""

    steps: int
    loss: float
    success: float


def build_model(tokenizer, config: ModelConfig, seed: int):
    """A randomly initialised ``GPT2LMHeadModel`` (float32, eval mode) from ``seed``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=config.hidden_size,
        n_layer=config.num_layers,
        n_head=config.num_heads,
        n_inner=config.intermediate_size,
        n_positions=config.max_positions,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    hf_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(hf_config)
    return model.eval()


def load_model(path: str):
    """(model, tokenizer) from a local Hugging Face model directory; ModelLoadError otherwise.

    The tokenizer must have an EOS token (a completion ends there); a missing pad token
    falls back to EOS.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise ModelLoadError(f"--model: {path!r} is not a directory (expected a local Hugging Face model directory)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - any reason the directory is unusable is reported in one line
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"--model: cannot load a causal LM and tokenizer from {path!r}: {reason}") from exc
    if tokenizer.eos_token_id is None:
        raise ModelLoadError(f"--model: the tokenizer in {path!r} has no EOS token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model.eval(), tokenizer


def save_model(model, tokenizer, path: Path) -> None:
    """Write the model and tokenizer so that ``load_model(path)`` restores them exactly."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def response_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Float32 logits (B, T, V) predicting the T response tokens of ``input_ids`` (B, P + T)."""
    position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    return logits[:, prompt_len - 1 : -1].float()


def warm_up(model, tokenizer, task: Task, config: ModelConfig, seed: int, device: torch.device) -> WarmupResult:
    """Supervised warm-up until the sampled success rate reaches ``config.warmup_target``.

    Loss per step: mean over answer tokens (EOS included) of -log p(token | prefix).
    """
    generator = torch.Generator().manual_seed(seed)
    check_problems = task.sample(config.warmup_check_prompts, torch.Generator().manual_seed(seed + 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.warmup_lr)
    loss_value, success, step = float("nan"), 0.0, 0
    while step < config.warmup_max_steps:
        model.train()
        problems = task.sample(config.warmup_batch, generator)
        prompt_ids, prompt_mask = encode_prompts(tokenizer, problems, device)
        answer_ids, answer_mask = encode_answers(tokenizer, problems, device)
        input_ids = torch.cat([prompt_ids, answer_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, answer_mask], dim=1)
        logits = response_logits(model, input_ids, attention_mask, prompt_ids.shape[1])
        token_loss = F.cross_entropy(logits.transpose(1, 2), answer_ids, reduction="none")
        loss = (token_loss * answer_mask).sum() / answer_mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value, step = float(loss.detach()), step + 1
        if step % config.warmup_check_every == 0:
            model.eval()
            check = collect_rollout(
                model,
                tokenizer,
                check_problems,
                group_size=config.warmup_check_group,
                max_new_tokens=task.max_answer_tokens + 4,
                generator=torch.Generator(device=device).manual_seed(seed + 2),
                device=device,
            )
            success = float(check.rewards.mean())
            if success >= getattr(task, "warmup_target", config.warmup_target):
                break
    model.eval()
    return WarmupResult(steps=step, loss=loss_value, success=success)
