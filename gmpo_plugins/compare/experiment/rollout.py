"""Group sampling, rewards and group-normalised advantages.

Each step draws P prompts and samples G completions per prompt (rows ``g*G .. g*G+G-1``
belong to prompt g) at temperature 1 with a seeded ``torch.Generator``, token by token,
until every row has produced EOS or ``max_new_tokens`` is reached. The response mask
covers every sampled token up to and including EOS.

Advantage of completion j in group g (rewards R, G >= 2):

    A_gj = (R_gj - mean_g R) / (std_g R + eps)     std: unbiased (as GRPO / verl)
    A_gj = 0                                        when all rewards of group g are equal
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from gmpo_plugins.compare.experiment.encoding import encode_prompts
from gmpo_plugins.compare.experiment.task import Problem, reward


@dataclass
class Rollout:
    """One batch of B = P * G sampled sequences (layout: ``gmpo_plugins.compare.experiment.model``)."""

    input_ids: torch.Tensor  # (B, P_len + T) long
    attention_mask: torch.Tensor  # (B, P_len + T) long
    prompt_len: int
    response_mask: torch.Tensor  # (B, T) bool
    rewards: torch.Tensor  # (B,) float32
    advantages: torch.Tensor  # (B,) float32

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]

    def digest(self) -> str:
        """Short SHA-256 of the prompts and sampled tokens: equal digests, equal rollouts."""
        data = torch.cat([self.input_ids.flatten(), self.attention_mask.flatten()]).cpu().numpy().tobytes()
        return hashlib.sha256(data).hexdigest()[:16]


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """(B,) group-normalised advantages of (B,) rewards in consecutive groups of ``group_size``."""
    if group_size < 2 or rewards.numel() % group_size:
        raise ValueError(f"group_size must be >= 2 and divide the {rewards.numel()} rewards, got {group_size}")
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)
    constant = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
    advantages = torch.where(constant, torch.zeros_like(grouped), (grouped - mean) / (std + eps))
    return advantages.view(-1)


@torch.no_grad()
def sample_completions(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    eos_id: int,
    pad_id: int,
    max_new_tokens: int,
    generator: torch.Generator,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample responses for left-padded prompts (B, P); ``temperature`` 0 decodes greedily
    (argmax, ``generator`` unused).

    Returns (input_ids (B, P + T), attention_mask (B, P + T), finished (B,) bool: EOS seen).
    Positions after a row's EOS hold ``pad_id`` and mask 0.
    """
    ids, mask = prompt_ids, prompt_mask
    finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    for _ in range(max_new_tokens):
        logits = _last_logits(model, ids, mask)
        if temperature == 0:
            token = logits.argmax(dim=-1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        ids = torch.cat([ids, token[:, None]], dim=1)
        mask = torch.cat([mask, (~finished).long()[:, None]], dim=1)
        finished = finished | (token == eos_id)
        if bool(finished.all()):
            break
    return ids, mask, finished


def completion_text(tokenizer, tokens: list[int], finished: bool) -> str:
    """Text of a sampled completion without its terminating EOS; any other special token
    stays in the text (so it cannot match an answer)."""
    return tokenizer.decode(tokens[:-1] if finished else tokens, skip_special_tokens=False)


def _last_logits(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Float32 logits (B, V) for the next token after ``ids`` (B, L)."""
    position_ids = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    return model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits[:, -1].float()


@dataclass
class Scored:
    """Completions of a list of prompts and their rewards (layout: ``gmpo_plugins.compare.experiment.model``)."""

    input_ids: torch.Tensor  # (B, P_len + T) long
    attention_mask: torch.Tensor  # (B, P_len + T) long
    prompt_len: int
    rewards: torch.Tensor  # (B,) float32


def score_completions(
    model,
    tokenizer,
    problems: list[Problem],
    *,
    max_new_tokens: int,
    generator: torch.Generator,
    device: torch.device,
    temperature: float = 1.0,
) -> Scored:
    """One completion per problem (temperature 0: greedy), scored with the task's reward."""
    prompt_ids, prompt_mask = encode_prompts(tokenizer, problems, device)
    input_ids, attention_mask, finished = sample_completions(
        model,
        prompt_ids,
        prompt_mask,
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
        max_new_tokens=max_new_tokens,
        generator=generator,
        temperature=temperature,
    )
    prompt_len = prompt_ids.shape[1]
    response_mask = attention_mask[:, prompt_len:].bool()
    response_ids = input_ids[:, prompt_len:]
    texts = [
        completion_text(tokenizer, row[m].tolist(), bool(done))
        for row, m, done in zip(response_ids.cpu(), response_mask.cpu(), finished.cpu(), strict=True)
    ]
    rewards = torch.tensor(
        [reward(text, bool(done), p.answer) for text, done, p in zip(texts, finished.cpu(), problems, strict=True)],
        dtype=torch.float32,
        device=device,
    )
    return Scored(input_ids, attention_mask, prompt_len, rewards)


def collect_rollout(
    model,
    tokenizer,
    problems: list[Problem],
    *,
    group_size: int,
    max_new_tokens: int,
    generator: torch.Generator,
    device: torch.device,
) -> Rollout:
    """Sample ``group_size`` completions per problem, score them, normalise per group."""
    repeated = [p for p in problems for _ in range(group_size)]
    scored = score_completions(
        model, tokenizer, repeated, max_new_tokens=max_new_tokens, generator=generator, device=device
    )
    return Rollout(
        input_ids=scored.input_ids,
        attention_mask=scored.attention_mask,
        prompt_len=scored.prompt_len,
        response_mask=scored.attention_mask[:, scored.prompt_len :].bool(),
        rewards=scored.rewards,
        advantages=group_advantages(scored.rewards, group_size),
    )
