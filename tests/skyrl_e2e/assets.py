"""The tiny task of the SkyRL end-to-end tests, built locally (nothing is downloaded).

model/   ``tests/tiny_models.tiny_model("llama", ...)`` saved with the tokenizer in one folder
         (SkyRL loads both from ``trainer.policy.model.path``), eager attention
train.jsonl   SkyRL's prompt dataset format: ``prompt`` (chat messages), ``env_class``
tokenizer     a word-level ``PreTrainedTokenizerFast`` (ChatML template): the words of the
              prompts, the ten digits, ``<|im_start|>``, ``<|im_end|>`` (end of sequence)
              and a pad token
"""

from __future__ import annotations

import json
import os

from tests.tiny_models import tiny_model

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = ["\n", "system", "user", "assistant", "add", "count", "say", "and", "is"]
DIGITS = [str(d) for d in range(10)]
VOCAB = SPECIAL + WORDS + DIGITS + ["<unk>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer():
    r"""Words split at spaces, "\\n" kept as its own token."""
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
    return tokenizer


def prompts(count: int) -> list[dict]:
    """``count`` rows ``{"prompt": [user message], "env_class": "gsm8k"}`` (the env is unused by
    the CPU generator, but SkyRL's dataset carries one per row)."""
    ops = ["add", "count", "say"]
    return [
        {"prompt": [{"role": "user", "content": f"{ops[i % 3]} {i % 10} and {(3 * i + 1) % 10}"}], "env_class": "gsm8k"}
        for i in range(count)
    ]


def build(folder: str, train_prompts: int = 8) -> dict[str, str]:
    """Build the model folder and the dataset under ``folder``; returns their paths."""
    from transformers import GenerationConfig

    model_dir = os.path.join(folder, "model")
    tokenizer = build_tokenizer()
    model = tiny_model(
        "llama",
        len(VOCAB),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    train = os.path.join(folder, "train.jsonl")
    with open(train, "w") as handle:
        for row in prompts(train_prompts):
            handle.write(json.dumps(row) + "\n")
    return {"model": model_dir, "train": train}
