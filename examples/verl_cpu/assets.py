r"""The tiny task the CPU runs train on, built locally (nothing is downloaded).

model/      a randomly initialised Qwen2 (hidden 64, 2 layers), float32
tokenizer/  a word-level tokenizer with a ChatML template, saved apart from the model
            (transformers 5 loads a folder whose config says qwen2 with Qwen2Tokenizer,
            which would garble a word-level vocabulary; verl's continuous-token builder
            needs "\\n" as one token and ``<|im_end|>``)
train.parquet, val.parquet   verl's RL dataset format: ``prompt`` (chat messages),
            ``data_source``, ``reward_model.ground_truth``, ``extra_info.index``
reward.py   ``compute_score``: the fraction of response words that are digits, a reward
            that varies between samples (a constant one gives GRPO zero advantages)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = ["\n", "system", "user", "assistant", "add", "count", "say", "the", "and", "is", "a", "b", "c", "d", "e"]
DIGITS = [str(d) for d in range(10)]
VOCAB = SPECIAL + WORDS + DIGITS + ["<unk>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

REWARD_SOURCE = '''"""Reward of the CPU smoke task: fraction of the response's words that are digits."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    words = solution_str.split()
    return sum(word.isdigit() for word in words) / max(1, len(words))
'''


@dataclass(frozen=True)
class Assets:
    """Paths of the built task (see the module docstring)."""

    model: str
    tokenizer: str
    train: str
    val: str
    reward: str

    def overrides(self) -> list[str]:
        """verl Hydra overrides that point a run at these assets."""
        return [
            f"data.train_files={self.train}",
            f"data.val_files={self.val}",
            f"actor_rollout_ref.model.path={self.model}",
            f"+actor_rollout_ref.model.tokenizer_path={self.tokenizer}",
            f"reward.custom_reward_function.path={self.reward}",
            "reward.custom_reward_function.name=compute_score",
        ]


def build_tokenizer(folder: str):
    r"""A ``PreTrainedTokenizerFast`` over ``VOCAB``: words split at spaces, "\\n" kept as a token."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({word: i for i, word in enumerate(VOCAB)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(" "), behavior="removed"), pre_tokenizers.Split(Regex("\n"), behavior="isolated")]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_model(folder: str, tokenizer, seed: int = 0) -> None:
    """A random Qwen2 (hidden 64, 2 layers, ~60k parameters) saved with its generation config."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(VOCAB),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config).float()
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    model.save_pretrained(folder)


def _rows(count: int, split: str, offset: int) -> list[dict]:
    ops = ["add", "count", "say"]
    rows = []
    for i in range(count):
        a, b = (i + offset) % 10, (3 * i + 1 + offset) % 10
        op = ops[i % len(ops)]
        answer = {"add": (a + b) % 10, "count": b, "say": a}[op]
        rows.append(
            {
                "data_source": "cpu_digits",
                "prompt": [{"role": "user", "content": f"{op} {a} and {b}"}],
                "ability": "toy",
                "reward_model": {"style": "rule", "ground_truth": str(answer)},
                "extra_info": {"index": i, "split": split},
            }
        )
    return rows


def build(folder: str, train_prompts: int = 16, val_prompts: int = 4) -> Assets:
    """Build every asset under ``folder`` (created; files inside are overwritten)."""
    import pandas as pd

    os.makedirs(folder, exist_ok=True)
    paths = Assets(
        model=os.path.join(folder, "model"),
        tokenizer=os.path.join(folder, "tokenizer"),
        train=os.path.join(folder, "train.parquet"),
        val=os.path.join(folder, "val.parquet"),
        reward=os.path.join(folder, "reward.py"),
    )
    tokenizer = build_tokenizer(paths.tokenizer)
    build_model(paths.model, tokenizer)
    pd.DataFrame(_rows(train_prompts, "train", 0)).to_parquet(paths.train)
    pd.DataFrame(_rows(val_prompts, "test", 100)).to_parquet(paths.val)
    with open(paths.reward, "w") as handle:
        handle.write(REWARD_SOURCE)
    return paths
