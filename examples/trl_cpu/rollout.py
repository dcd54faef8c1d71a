"""``seeded_rollout``: TRL's ``rollout_func`` hook, sampling with ``seeded_generation.seeded_sample``.

GRPOTrainer calls ``rollout_func(prompts, trainer)`` with the prompts of one generation batch as
its RepeatSampler drew them (each prompt ``num_generations`` times) and expects one completion per
entry. Each prompt is tokenised exactly as TRL tokenises it for its own generation
(``apply_chat_template(..., add_generation_prompt=True, tokenize=True)`` for conversational
prompts, the tokenizer otherwise); the k-th entry of a prompt in the batch is its sample k
(``SampleIndex``, reset per batch), sampled from the trainer's current weights with TRL's
temperature, top-k, top-p and ``max_completion_length``. With one process (how
``gmpo-plugins frameworks`` runs TRL on a CPU) the batch holds every sample of its prompts;
several processes would each count from 0 over their slice.
"""

from __future__ import annotations

from typing import Any

import torch
from seeded_generation import SampleIndex, seeded_sample


def prompt_token_ids(prompts: list[Any], tokenizer: Any) -> list[list[int]]:
    """The token ids TRL's own generation would give ``prompts`` (GRPOTrainer._tokenize_prompts)."""
    if isinstance(prompts[0], list):  # conversational: a list of messages
        tokenized = tokenizer.apply_chat_template(
            conversation=prompts, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return [list(ids) for ids in tokenized["input_ids"]]
    return [list(ids) for ids in tokenizer(text=prompts)["input_ids"]]


def seeded_rollout(prompts: list[Any], trainer: Any) -> dict[str, list[list[Any]]]:
    """One seeded completion per entry of ``prompts`` (module docstring): ``prompt_ids``,
    ``completion_ids`` and ``logprobs`` (under the sampling distribution), a list per entry."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    prompt_ids = prompt_token_ids(prompts, trainer.processing_class)
    index = SampleIndex()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            samples = [
                seeded_sample(
                    model,
                    ids,
                    index.next(ids),
                    trainer.max_completion_length,
                    temperature=trainer.temperature,
                    top_k=trainer.top_k,
                    top_p=trainer.top_p,
                )
                for ids in prompt_ids
            ]
    finally:
        model.train(was_training)
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": [sample.token_ids for sample in samples],
        "logprobs": [sample.logprobs for sample in samples],
    }
