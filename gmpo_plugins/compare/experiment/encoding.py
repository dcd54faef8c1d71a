"""Token layout of the toy task's text: prompts left-padded, answers right-padded and
closed by EOS, so that the warm-up, the rollout and training build the same sequences
(layout in ``compare.experiment.model``'s docstring)."""

from __future__ import annotations

import torch

from gmpo_plugins.compare.experiment.task import Problem


def encode_prompts(tokenizer, problems: list[Problem], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask, both (B, P)."""
    encoded = tokenizer([p.prompt for p in problems], add_special_tokens=False, padding=True, return_tensors="pt")
    return encoded.input_ids.to(device), encoded.attention_mask.to(device)


def encode_answers(tokenizer, problems: list[Problem], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded answer ids followed by EOS, and their mask, both (B, T)."""
    rows = [tokenizer(p.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for p in problems]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)
