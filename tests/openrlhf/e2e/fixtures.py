"""Inputs of the end-to-end runs, built in a folder by the test (no downloads).

``build_fixtures(root)`` writes:
  model/         a random tiny Llama (tests.tiny_models, vocab 64) in bfloat16, the dtype OpenRLHF trains in,
                 its eos row of lm_head scaled by 30 so that sampled completions end at varied lengths
                 (token-mean and seq-mean-token-mean then differ); a character-level tokenizer
                 (``PreTrainedTokenizerFast``: WordLevel over single characters, ``Split("", "isolated")``);
                 bos 1, eos 2, pad 0
  prompts.jsonl  ``{"input": "what is a+b?", "label": "<a+b>"}`` for 16 (a, b) pairs
  reward.py      OpenRLHF's ``--reward.remote_url <file>.py`` hook: ``reward_func(queries, prompts, labels)``;
                 the reward of a completion is a deterministic number in [0, 1) from its characters,
                 so the samples of a prompt almost always differ and group_norm advantages are non-zero
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tests.tiny_models import tiny_model

SPECIAL = ["<pad>", "<s>", "</s>"]
CHARACTERS = "0123456789+-=?. abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX"
VOCAB = 64
EOS_LOGIT_SCALE = 30.0

REWARD = '''"""Reward of the end-to-end test runs: a deterministic number in [0, 1) per completion."""

import torch


def reward_func(queries, prompts, labels):
    scores = []
    for query, prompt in zip(queries, prompts):
        completion = query[len(prompt):] if query.startswith(prompt) else query
        scores.append(sum((i + 1) * ord(c) for i, c in enumerate(completion)) % 97 / 97.0)
    rewards = torch.tensor(scores, dtype=torch.float32)
    return {"rewards": rewards, "scores": rewards, "extra_logs": {}}
'''


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: index for index, token in enumerate(SPECIAL + list(CHARACTERS[: VOCAB - len(SPECIAL)]))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<pad>"
    )


def build_model(path: Path, seed: int = 0) -> None:
    model = tiny_model("llama", VOCAB, seed=seed, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    with torch.no_grad():  # a spread-out eos logit: completions end at varied lengths
        model.lm_head.weight[model.config.eos_token_id] *= EOS_LOGIT_SCALE
    model.to(torch.bfloat16).save_pretrained(path)
    tokenizer().save_pretrained(path)


def build_fixtures(root: Path) -> dict[str, Path]:
    """The model folder, the prompt file and the reward file under ``root`` (created)."""
    root.mkdir(parents=True, exist_ok=True)
    model = root / "model"
    build_model(model)
    prompts = root / "prompts.jsonl"
    rows = [{"input": f"what is {a}+{b}?", "label": str(a + b)} for a in range(4) for b in range(4)]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    reward = root / "reward.py"
    reward.write_text(REWARD)
    return {"model": model, "prompts": prompts, "reward": reward}
