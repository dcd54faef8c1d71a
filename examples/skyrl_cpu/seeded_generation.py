"""Seeded sampling with Hugging Face ``generate`` that any framework's CPU rollout stand-in can share.

A sample depends only on the model's weights, the prompt text and the sample's index among the
samples of that prompt: the seed is ``sha256(prompt_text | sample_index)``, so two runs that
order or split a batch differently draw the same responses, and so do two frameworks that
hold the same weights. The caller tokenises (its framework's chat template); no framework is
imported here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch


def sample_seed(prompt_text: str, sample_index: int) -> int:
    """A 63-bit seed from the prompt text and the sample's index (0 .. n-1) for that prompt."""
    digest = hashlib.sha256(f"{sample_index}|{prompt_text}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass(frozen=True)
class Sample:
    """One sampled response: its token ids, their log-probabilities under the sampling model,
    and ``stop_reason`` ("stop" when it ended with the end-of-sequence token, else "length")."""

    token_ids: list[int]
    logprobs: list[float]
    stop_reason: str


@torch.no_grad()
def seeded_sample(
    model: torch.nn.Module,
    prompt_ids: list[int],
    prompt_text: str,
    sample_index: int,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    temperature: float = 1.0,
) -> Sample:
    """Sample up to ``max_new_tokens`` tokens after ``prompt_ids`` (pure sampling, no top-k/p),
    with torch's global generator seeded by ``sample_seed(prompt_text, sample_index)`` inside a
    forked RNG state (the caller's RNG is left as it was).

    logprobs[t] = log softmax(logits_t / temperature)[token_t], from ``generate``'s scores.
    """
    inputs = torch.tensor([prompt_ids], dtype=torch.long)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(sample_seed(prompt_text, sample_index))
        out = model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            do_sample=True,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
    tokens = out.sequences[0, inputs.shape[1] :].tolist()
    logprobs = []
    for step, token in enumerate(tokens):
        logprobs.append(float(torch.log_softmax(out.scores[step][0].float(), dim=-1)[token]))
    ended = eos_token_id in tokens
    if ended:
        cut = tokens.index(eos_token_id) + 1
        tokens, logprobs = tokens[:cut], logprobs[:cut]
    return Sample(tokens, logprobs, "stop" if ended else "length")
