"""One training step of ``gmpo-openrlhf`` with the batch split differently, and how far apart the
actor's weight updates end up (shared by the invariance tests and ``python -m tests.openrlhf.e2e.invariance``).

Each run: the same 4 samples (2 prompts x 2, the rollouts seeded from prompt and sample index) in one
optimizer step (``--train.batch_size 4``), split over ``--actor.num_gpus_per_node`` 1 or 2 actor ranks
(data parallel: each rank trains on its share of the replay buffer, DeepSpeed averages the gradients
over ranks) and, on each rank, into micro-batches of ``--train.micro_batch_size`` samples: ``SPLITS``
lists (ranks, micro-batch size). The comparison is of the updates ``delta = w_after - w_before`` over
all weights: ``|delta_k - delta_1| / |delta_1|`` (Frobenius norms over every tensor), against the run
with 1 rank and 1 micro-batch.

The actor trains in fp32 (``--ds.param_dtype fp32``: a choice the test-only sitecustomize adds to
OpenRLHF's bf16 / fp16, see its docstring), so the differences measure the order of fp32 summation, not
bf16 rounding. Optimizer settings make the step measure the gradient's scale, not only its sign: Adam's
first step is ``lr * g / (|g| + eps)``; with ``eps = 100`` far above every gradient entry this is
``(lr / eps) * g`` (short of it by at most ``max|g_i| / eps`` relative), so a micro-batch or a rank
normalised wrongly (a loss 2x too large, say) moves the weights 2x too far. No gradient clipping
(``--actor.max_norm 0``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from tests.openrlhf.e2e.fixtures import build_fixtures
from tests.openrlhf.e2e.runner import NO_KL_ARGS, Run, initial_weights, run_gmpo_openrlhf

LR, EPS = 10.0, 100.0
LR_OVER_EPS = LR / EPS
FP32_ARGS = ("--ds.param_dtype", "fp32")
LINEAR_STEP_ARGS = [
    *FP32_ARGS,
    "--actor.adam.lr",
    str(LR),
    "--actor.adam.eps",
    str(EPS),
    "--actor.max_norm",
    "0",
    *NO_KL_ARGS,
]
SAMPLES = 4  # --train.batch_size: the samples of the one step
# (actor ranks, micro-batch size): the reference first, then 2 and 4 micro-batches on one rank, and 2 ranks
# with 2 micro-batches each
SPLITS = ((1, 4), (1, 2), (1, 1), (2, 1))
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


def micro_batches_per_rank(ranks: int, micro_batch_size: int) -> int:
    return SAMPLES // ranks // micro_batch_size


def step_args(loss: str, loss_agg_mode: str, micro_batch_size: int, extra: tuple = (), ranks: int = 1) -> list:
    return [
        "--actor.policy_loss_type",
        loss,
        "--actor.loss_agg_mode",
        loss_agg_mode,
        "--train.micro_batch_size",
        str(micro_batch_size),
        "--actor.num_gpus_per_node",
        str(ranks),
        *LINEAR_STEP_ARGS,
        *extra,
    ]


def one_step(
    fixtures: dict,
    out: Path,
    loss: str,
    loss_agg_mode: str,
    micro_batch_size: int,
    extra: tuple = (),
    ranks: int = 1,
) -> Run:
    args = step_args(loss, loss_agg_mode, micro_batch_size, extra, ranks)
    return run_gmpo_openrlhf(fixtures, out, args, steps=1).check()


def calls_per_rank(run: Run) -> dict[int, list[int]]:
    """``{rank: [rows of each loss call]}`` from the loss-call marker, in call order per rank."""
    calls: dict[int, list[int]] = {}
    for call in run.loss_calls():
        calls.setdefault(call["rank"], []).append(call["rows"])
    return calls


def update(run: Run, before: dict) -> dict:
    after = run.actor_weights()
    return {name: after[name].double() - before[name].double() for name in before}


def relative_difference(delta: dict, reference: dict) -> float:
    num = sum(float((delta[name] - reference[name]).pow(2).sum()) for name in reference)
    den = sum(float(reference[name].pow(2).sum()) for name in reference)
    return (num / den) ** 0.5


def table(fixtures: dict, root: Path, losses: tuple) -> list[dict]:
    """Rows ``{loss, loss_agg_mode, "differences": {(ranks, size): d}, seconds}`` over ``SPLITS``."""
    before = initial_weights(fixtures["model"])
    rows = []
    for loss in losses:
        for mode in LOSS_AGG_MODES:
            runs = {
                (ranks, size): one_step(fixtures, root / f"{loss}-{mode}-{ranks}x{size}", loss, mode, size, (), ranks)
                for ranks, size in SPLITS
            }
            reference = update(runs[SPLITS[0]], before)
            rows.append(
                {
                    "loss": loss,
                    "loss_agg_mode": mode,
                    "differences": {
                        split: relative_difference(update(run, before), reference) for split, run in runs.items()
                    },
                    "seconds": [round(run.seconds) for run in runs.values()],
                }
            )
    return rows


def heading() -> str:
    """The table's header: one column per split other than the reference (micro-batches per rank)."""
    columns = [
        f"{ranks} rank{'s' * (ranks > 1)} x {micro_batches_per_rank(ranks, size)} micro-batches"
        for ranks, size in SPLITS[1:]
    ]
    rule = "|---" * (len(columns) + 3) + "|"
    return "| loss | --actor.loss_agg_mode | " + " | ".join(columns) + " | s per run |\n" + rule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs (created; must not exist)")
    parser.add_argument("--losses", nargs="+", default=["gmpo", "ppo", "gspo"])
    args = parser.parse_args()
    args.out.mkdir(parents=True)
    fixtures = build_fixtures(args.out / "fixtures")
    print(heading())
    for row in table(fixtures, args.out, tuple(args.losses)):
        differences = " | ".join(f"{row['differences'][split]:.1e}" for split in SPLITS[1:])
        seconds = ", ".join(map(str, row["seconds"]))
        print(f"| {row['loss']} | {row['loss_agg_mode']} | {differences} | {seconds} |", flush=True)


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
