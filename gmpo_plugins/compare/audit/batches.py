"""The audit's batches and splits.

Batches: the hard batches of ``gmpo-plugins parity`` (``parity.harness.parity_cases``) in
float64, without its bfloat16 copy (float64 is the audit's precision) and its rollout
IS-weight case (the audited setting has no rollout correction): near, far, guard, zero_adv.
Beside them, ``overflow_probe``: one float32 token whose log ratio overflows ``exp``.

Splits: the batch's B rows over ``ranks`` simulated data-parallel ranks (row chunks), each
rank's rows over ``micro`` micro-batches. A framework's caller computes each micro-batch's
loss as its trainer does (the counts of ``Part``), the micro-batch gradients accumulate and
the ranks' gradients are averaged, as DDP/FSDP/DeepSpeed all-reduce them. ``generations``:
the rollout (generation) batch spans that many optimizer steps, the others copies of this
one; only TRL normalises by the generation batch (``steps_per_generation`` = micro x
generations, ``num_items_in_batch`` its tokens), the others per optimizer step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from gmpo_plugins.compare.parity.harness import ParityCase, parity_cases

SKIPPED = ("bf16", "is_weights")
OVERFLOW_LOG_RATIO = 89.0  # > ln(float32 max) = 88.72


@dataclass(frozen=True)
class Split:
    """``ranks`` simulated ranks of ``micro`` micro-batches each."""

    micro: int = 1
    ranks: int = 1
    generations: int = 1

    @property
    def label(self) -> str:
        label = f"{self.micro} micro-batches" if self.ranks == 1 else f"{self.ranks} ranks"
        return label if self.generations == 1 else f"{label}, generation batch of {self.generations} steps"


WHOLE = Split()
SPLITS = (Split(micro=2), Split(micro=4), Split(ranks=2), Split(micro=2, generations=2))
FACTOR_SPLIT = Split(micro=4)


@dataclass(frozen=True)
class Part:
    """One micro-batch of a split, with the whole batch and the counts a trainer knows.

    Args:
        case: the whole batch (float64; log_probs is the leaf gradients accumulate in).
        log_probs: (B, T) the leaf tensor (requires grad).
        rows: indices of this micro-batch's rows.
        micro: micro-batches per rank (the gradient accumulation steps).
        ranks: data-parallel ranks.
        generations: optimizer steps the generation batch spans (this one and copies).
    """

    case: ParityCase
    log_probs: torch.Tensor
    rows: torch.Tensor
    micro: int
    ranks: int
    generations: int = 1

    @property
    def global_rows(self) -> int:
        """B: the sequences of the global mini-batch, empty rows included."""
        return int(self.case.mask.shape[0])

    @property
    def global_tokens(self) -> int:
        """The valid tokens of the global mini-batch."""
        return int(self.case.mask.sum())

    @property
    def nonempty_rows(self) -> int:
        """The sequences of the global mini-batch with a valid token."""
        return int((self.case.mask.sum(-1) > 0).sum())

    def take(self, tensor: torch.Tensor) -> torch.Tensor:
        """This micro-batch's rows of a (B, ...) tensor."""
        return tensor[self.rows]


def audit_cases() -> list[ParityCase]:
    """The hard batches in float64 (module docstring)."""
    cases = []
    for case in parity_cases():
        if case.name in SKIPPED:
            continue
        cases.append(
            ParityCase(
                case.name,
                case.log_probs.double(),
                case.old_log_probs.double(),
                case.advantages.double(),
                case.mask,
            )
        )
    return cases


def overflow_probe() -> ParityCase:
    """One float32 token with log ratio 89, A = -1 (the side no PPO-style clip bounds): finite
    input whose exp overflows float32 unless the log ratio is bounded first (the registry
    bounds it at 20: its loss is e^20)."""
    old = torch.tensor([[-0.5 - OVERFLOW_LOG_RATIO]])
    return ParityCase("overflow_float32", torch.tensor([[-0.5]]), old, torch.tensor([-1.0]), torch.tensor([[True]]))


def parts(case: ParityCase, log_probs: torch.Tensor, split: Split) -> Iterator[Part]:
    """The micro-batches of ``split``, rank by rank."""
    for rank_rows in torch.arange(case.mask.shape[0]).chunk(split.ranks):
        for rows in rank_rows.chunk(split.micro):
            yield Part(case, log_probs, rows, split.micro, split.ranks, split.generations)
