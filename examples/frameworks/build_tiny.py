r"""Build the tiny example's model and prompts next to ``tiny.toml`` (nothing is downloaded).

    python examples/frameworks/build_tiny.py        # needs torch, transformers, tokenizers

model/          a randomly initialised Llama (hidden 64, 2 layers, float32) with a word-level
                tokenizer and a ChatML template saved in the same folder (OpenRLHF and SkyRL load
                the tokenizer from the model directory); "\n" and ``<|im_end|>`` are single tokens
prompts.jsonl   16 prompts ``{"prompt": "add 3 and 4", "answer": "7"}``: add / count / say two digits
prompts_first_step.jsonl   its first 2 prompts (``tiny_adam.toml``: SkyRL shuffles its prompts)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = ["\n", "system", "user", "assistant", "add", "count", "say", "the", "and", "is"]
VOCAB = SPECIAL + WORDS + [str(d) for d in range(10)] + ["<unk>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer():
    r"""A ``PreTrainedTokenizerFast`` over ``VOCAB``: words split at spaces, "\n" kept as a token."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({word: i for i, word in enumerate(VOCAB)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(" "), behavior="removed"), pre_tokenizers.Split(Regex("\n"), behavior="isolated")]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(folder: Path, seed: int = 0) -> None:
    """The random Llama and its tokenizer, saved in ``folder``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
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
    LlamaForCausalLM(config).float().save_pretrained(folder)
    tokenizer.save_pretrained(folder)


FIRST_STEP = "prompts_first_step.jsonl"  # the first RL step's 2 prompts only: tiny_adam.toml's dataset


def prompts(count: int = 16) -> list[dict[str, str]]:
    """``count`` rows of the digits task."""
    rows = []
    for i in range(count):
        a, b = i % 10, (3 * i + 1) % 10
        op = ("add", "count", "say")[i % 3]
        answer = {"add": (a + b) % 10, "count": b, "say": a}[op]
        rows.append({"prompt": f"{op} {a} and {b}", "answer": str(answer)})
    return rows


def main() -> None:
    build_model(HERE / "model")
    rows = prompts()
    (HERE / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (HERE / FIRST_STEP).write_text("".join(json.dumps(row) + "\n" for row in rows[:2]))
    print(f"built {HERE / 'model'}, {HERE / 'prompts.jsonl'} and {HERE / FIRST_STEP}")


if __name__ == "__main__":
    main()
