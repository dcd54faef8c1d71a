"""The embedded toy task: reverse a digit string, with a binary, verifiable reward.

    prompt      "<d_1 ... d_n>="          n digits in [min_digits, max_digits], then "="
    answer      "<d_n ... d_1>"           followed by the end-of-sequence token
    reward      1.0 when the completion ends with EOS and the text before EOS is exactly the
                answer (surrounding whitespace ignored), else 0.0

With the default 16 digits a correct completion has 17 tokens (digits plus EOS), long
enough for GMPO's per-sequence geometric mean to differ from GRPO's arithmetic token
mean; wrong completions may stop early or run on, so lengths still vary in a batch.
(Variable prompt lengths are supported, but the tiny default model learns them far more
slowly: it has to locate "=" before it can reverse.)

The tokenizer is a real Hugging Face fast tokenizer built in code (no download): one token
per character over ``<pad> <eos> <unk> = 0 1 ... 9``; it saves and loads with
``save_pretrained`` / ``AutoTokenizer`` like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD, EOS, UNK, SEP = "<pad>", "<eos>", "<unk>", "="
VOCAB = (PAD, EOS, UNK, SEP, *"0123456789")


@dataclass(frozen=True)
class Problem:
    """One prompt and the text its completion must reproduce (without EOS)."""

    prompt: str
    answer: str


@dataclass(frozen=True)
class ReverseTask:
    """Digit strings of ``min_digits..max_digits`` characters, to be written backwards."""

    min_digits: int = 16
    max_digits: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(
                f"ReverseTask: need 1 <= min_digits <= max_digits, got {self.min_digits}, {self.max_digits}"
            )

    def sample(self, n: int, generator: torch.Generator) -> list[Problem]:
        """``n`` problems drawn with ``generator`` (a CPU ``torch.Generator``)."""
        lengths = torch.randint(self.min_digits, self.max_digits + 1, (n,), generator=generator)
        digits = torch.randint(0, 10, (n, self.max_digits), generator=generator)
        problems = []
        for row, length in zip(digits.tolist(), lengths.tolist(), strict=True):
            text = "".join(str(d) for d in row[:length])
            problems.append(Problem(prompt=text + SEP, answer=text[::-1]))
        return problems

    @property
    def max_answer_tokens(self) -> int:
        """Tokens of the longest correct completion, EOS included (char tokenizer)."""
        return self.max_digits + 1


def reward(completion: str, finished: bool, answer: str) -> float:
    """1.0 when the completion stopped with EOS (``finished``) and its text equals ``answer``
    up to surrounding whitespace; 0.0 otherwise."""
    return 1.0 if finished and completion.strip() == answer else 0.0


def build_char_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` over ``VOCAB`` (ids in that order)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab={tok: i for i, tok in enumerate(VOCAB)}, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern=Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
