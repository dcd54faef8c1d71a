"""Seeded sampling shared by every CPU rollout stand-in (examples/verl_cpu, examples/openrlhf_cpu,
examples/skyrl_cpu, examples/trl_cpu), so that frameworks holding the same weights draw the same
responses (an example, not shipped; no framework is imported here).

A response depends only on the model's weights, the prompt's token ids and the sample's index
among the samples of that prompt drawn with those weights::

    seed = int.from_bytes(sha256(f"{sample_index}|{','.join(prompt_ids)}")[:8], "little") >> 1

The prompt enters as its token ids, not its text: every framework hands its rollout engine the
ids it tokenised (its own chat template), and equal ids are what makes two frameworks' prompts
equal. ``SampleIndex`` numbers the samples of each prompt from 0 and is reset when new weights
arrive, so two runs that order or split a batch differently draw the same set of responses for
each prompt, and so do two frameworks.

Sampling is Hugging Face ``generate`` in the model's dtype with torch's global generator seeded
inside a forked RNG state (the caller's RNG is left as it was), stopped after the first
end-of-sequence token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def sample_seed(prompt_ids: Sequence[int], sample_index: int) -> int:
    """A 63-bit seed from the prompt's token ids and the sample's index (0 .. n-1) for that prompt."""
    text = f"{sample_index}|{','.join(str(int(token)) for token in prompt_ids)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


class SampleIndex:
    """The index of each new sample among the samples of its prompt (0, 1, ...), since ``reset``."""

    def __init__(self) -> None:
        self._drawn: dict[tuple[int, ...], int] = {}

    def next(self, prompt_ids: Sequence[int]) -> int:
        """The index of the next sample of ``prompt_ids``."""
        key = tuple(int(token) for token in prompt_ids)
        index = self._drawn.get(key, 0)
        self._drawn[key] = index + 1
        return index

    def reset(self) -> None:
        """Start counting again from 0 (new weights: a new rollout batch)."""
        self._drawn.clear()


@dataclass(frozen=True)
class Sample:
    """One response: its token ids (up to and including the first end-of-sequence token),
    ``logprobs`` under the sampling distribution (log softmax of the logits after temperature,
    top-k and top-p, as verl's servers report), ``raw_logprobs`` under the model's own
    distribution (log softmax of the logits, as vLLM's default ``raw_logprobs``), and
    ``stop_reason``: "stop" when it ended with the end-of-sequence token, else "length"."""

    token_ids: list[int]
    logprobs: list[float]
    raw_logprobs: list[float]
    stop_reason: str


def _token_logprobs(rows: Sequence[torch.Tensor], tokens: list[int]) -> list[float]:
    if not tokens:
        return []
    scores = torch.stack(list(rows[: len(tokens)]))[:, 0].float()  # (length, vocab)
    index = torch.tensor(tokens)[:, None]
    return torch.log_softmax(scores, dim=-1).gather(-1, index)[:, 0].tolist()


@torch.no_grad()
def seeded_sample(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    sample_index: int,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    min_new_tokens: int = 0,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
) -> Sample:
    """Sample up to ``max_new_tokens`` tokens after ``prompt_ids`` with the seed
    ``sample_seed(prompt_ids, sample_index)`` (module docstring).

    Args:
        model: a Hugging Face causal LM.
        prompt_ids: the prompt's token ids, (P,).
        sample_index: the sample's index among the samples of this prompt (``SampleIndex``).
        max_new_tokens: the response length limit.
        temperature: 0 or less samples greedily.
        top_k: None, 0 or less: no top-k filter.
        top_p: nucleus mass (1.0: none).
        min_new_tokens: end-of-sequence is suppressed before this many tokens.
        eos_token_id: None: the model's ``generation_config``'s.
        pad_token_id: None: the model's ``generation_config``'s.

    Returns:
        The ``Sample``: token ids and their log-probabilities, (R,) each, R <= max_new_tokens.
    """
    inputs = torch.tensor([list(prompt_ids)], dtype=torch.long)
    config = model.generation_config
    eos = config.eos_token_id if eos_token_id is None else eos_token_id
    pad = config.pad_token_id if pad_token_id is None else pad_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    greedy = temperature <= 0
    options: dict = {"do_sample": not greedy}
    if not greedy:
        options.update(temperature=temperature, top_p=top_p, top_k=top_k if top_k and top_k > 0 else None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(sample_seed(prompt_ids, sample_index))
        out = model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens or None,
            eos_token_id=eos,
            pad_token_id=pad if pad is not None else 0,
            output_scores=True,
            output_logits=True,
            return_dict_in_generate=True,
            **options,
        )
    tokens = out.sequences[0, inputs.shape[1] :].tolist()
    ended = next((k for k, token in enumerate(tokens) if token in eos_ids), None)
    if ended is not None:
        tokens = tokens[: ended + 1]
    return Sample(
        tokens,
        _token_logprobs(out.scores, tokens),
        _token_logprobs(out.logits, tokens),
        "stop" if ended is not None else "length",
    )
