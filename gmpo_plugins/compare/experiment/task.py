"""The embedded toy tasks, each with a binary, verifiable reward and a fixed held-out set.

``repeat`` (the default): write a digit a given number of times.

    prompt      "<d>x<nn>="       digit d, count n in [min_count, max_count] as two digits
    answer      "<d * n>"         the digit n times, then the end-of-sequence token
    lengths     a correct completion has n + 1 tokens (2..21 by default): lengths differ
                between groups (different n) and within a group (wrong completions stop
                early or run on), so GMPO's per-sequence 1/|o| and GRPO's token mean weight
                sequences differently

``reverse``: write a digit string backwards.

    prompt      "<d_1 ... d_n>="  n digits in [min_digits, max_digits], then "="
    answer      "<d_n ... d_1>"   then EOS; with the default 16 digits every correct
                completion has 17 tokens, so lengths vary only through wrong completions

Each task also fixes where its supervised warm-up stops (``warmup_target``: share of right
sampled completions) and its default RL learning rate (``rl_lr``, 1.5e-4 for both): at 2e-3
(and 1e-3, 5e-4 on repeat) the first Adam updates, which move every parameter by about the
learning rate, wreck the tiny warmed-up model within a step or two.

Reward (both): 1.0 when the completion ends with EOS and the text before EOS is exactly the
answer (surrounding whitespace ignored), else 0.0.

Held-out prompts: each task fixes ``held_out_size`` problems with its own generator
(independent of the run's seed); ``sample`` never returns one of them, so held-out accuracy
is measured on prompts the model never trains on (neither in warm-up nor in RL).

The tokenizer is a real Hugging Face fast tokenizer built in code (no download): one token
per character over ``<pad> <eos> <unk> = 0 1 ... 9 x``; it saves and loads with
``save_pretrained`` / ``AutoTokenizer`` like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

PAD, EOS, UNK, SEP, TIMES = "<pad>", "<eos>", "<unk>", "=", "x"
VOCAB = (PAD, EOS, UNK, SEP, *"0123456789", TIMES)
HELD_OUT_SEED = 2507_20673


@dataclass(frozen=True)
class Problem:
    """One prompt and the text its completion must reproduce (without EOS)."""

    prompt: str
    answer: str


class Task(Protocol):
    """What the trainer, the warm-up and the evaluation need from a task."""

    @property
    def name(self) -> str:
        """The ``--task`` value."""

    @property
    def warmup_target(self) -> float:
        """Supervised warm-up stops when this share of sampled completions is right."""

    @property
    def rl_lr(self) -> float:
        """Default Adam learning rate of the RL updates."""

    def sample(self, n: int, generator: torch.Generator) -> list[Problem]:
        """``n`` training problems drawn with ``generator``; never a held-out prompt."""

    def held_out(self) -> list[Problem]:
        """The fixed held-out problems (the same for every run)."""

    @property
    def max_answer_tokens(self) -> int:
        """Tokens of the longest correct completion, EOS included."""

    def describe(self) -> str:
        """One line for the report: prompts, answers, lengths, reward."""


@dataclass(frozen=True)
class RepeatTask:
    """Write digit d exactly n times (module docstring); 10 * (max_count - min_count + 1) prompts."""

    min_count: int = 1
    max_count: int = 12
    held_out_size: int = 32
    warmup_target: float = 0.5
    rl_lr: float = 1.5e-4
    name: str = field(default="repeat", init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.min_count <= self.max_count <= 99:
            raise ValueError(
                f"RepeatTask: need 1 <= min_count <= max_count <= 99, got {self.min_count}, {self.max_count}"
            )
        if not 1 <= self.held_out_size < len(self._all()):
            raise ValueError(
                f"RepeatTask: held_out_size must be in [1, {len(self._all()) - 1}], got {self.held_out_size}"
            )

    def _all(self) -> list[Problem]:
        return [
            Problem(prompt=f"{digit}{TIMES}{count:02d}{SEP}", answer=str(digit) * count)
            for count in range(self.min_count, self.max_count + 1)
            for digit in range(10)
        ]

    def _split(self) -> tuple[list[Problem], list[Problem]]:
        problems = self._all()
        order = torch.randperm(len(problems), generator=torch.Generator().manual_seed(HELD_OUT_SEED)).tolist()
        held = set(order[: self.held_out_size])
        return [p for i, p in enumerate(problems) if i not in held], [problems[i] for i in sorted(held)]

    def sample(self, n: int, generator: torch.Generator) -> list[Problem]:
        train, _ = self._split()
        return [train[i] for i in torch.randint(0, len(train), (n,), generator=generator).tolist()]

    def held_out(self) -> list[Problem]:
        return self._split()[1]

    @property
    def max_answer_tokens(self) -> int:
        return self.max_count + 1

    def describe(self) -> str:
        return (
            f"repeat: write digit d n times (n = {self.min_count}..{self.max_count}, "
            f"{self.min_count + 1}..{self.max_count + 1} tokens with EOS), binary exact-match reward"
        )


@dataclass(frozen=True)
class ReverseTask:
    """Digit strings of ``min_digits..max_digits`` characters, to be written backwards."""

    min_digits: int = 16
    max_digits: int = 16
    held_out_size: int = 32
    warmup_target: float = 0.2
    rl_lr: float = 1.5e-4
    name: str = field(default="reverse", init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(
                f"ReverseTask: need 1 <= min_digits <= max_digits, got {self.min_digits}, {self.max_digits}"
            )
        if self.held_out_size < 1:
            raise ValueError(f"ReverseTask: held_out_size must be >= 1, got {self.held_out_size}")

    def _draw(self, n: int, generator: torch.Generator) -> list[Problem]:
        lengths = torch.randint(self.min_digits, self.max_digits + 1, (n,), generator=generator)
        digits = torch.randint(0, 10, (n, self.max_digits), generator=generator)
        problems = []
        for row, length in zip(digits.tolist(), lengths.tolist(), strict=True):
            text = "".join(str(d) for d in row[:length])
            problems.append(Problem(prompt=text + SEP, answer=text[::-1]))
        return problems

    def held_out(self) -> list[Problem]:
        return self._draw(self.held_out_size, torch.Generator().manual_seed(HELD_OUT_SEED))

    def sample(self, n: int, generator: torch.Generator) -> list[Problem]:
        held = {p.prompt for p in self.held_out()}
        problems: list[Problem] = []
        while len(problems) < n:
            problems += [p for p in self._draw(n - len(problems), generator) if p.prompt not in held]
        return problems

    @property
    def max_answer_tokens(self) -> int:
        return self.max_digits + 1

    def describe(self) -> str:
        return (
            f"reverse: write {self.min_digits}-{self.max_digits} digit strings backwards "
            f"({self.min_digits + 1}-{self.max_digits + 1} tokens with EOS), binary exact-match reward"
        )


TASKS: dict[str, Callable[[], Task]] = {"repeat": RepeatTask, "reverse": ReverseTask}
DEFAULT_TASK = "repeat"


def make_task(name: str) -> Task:
    """The task ``name`` with its default settings; ValueError listing the valid names otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(TASKS)}")
    return TASKS[name]()


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
