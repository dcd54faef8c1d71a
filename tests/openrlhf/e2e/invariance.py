"""One training step of ``gmpo-openrlhf`` with the batch split differently, and how far apart the
actor's weight updates end up (shared by the invariance tests and ``python -m tests.openrlhf.e2e.invariance``).

Each run: the same 4 samples (2 prompts x 2, the rollouts seeded from prompt and sample index) in one
optimizer step (``--train.batch_size 4``), ``--train.micro_batch_size`` 4, 2 or 1 (1, 2 or 4
micro-batches), for one ``--actor.loss_agg_mode``. The comparison is of the updates
``delta = w_after - w_before`` over all weights: ``|delta_k - delta_1| / |delta_1|`` (Frobenius norms
over every tensor), against the run with 1 micro-batch.

Optimizer settings make the step measure the gradient's scale, not only its sign: Adam's first step is
``lr * g / (|g| + eps)``; with ``eps = 100`` far above every gradient entry this is ``(lr / eps) * g``, so a
micro-batch normalised wrongly (a loss 2x too large, say) moves the weights 2x too far. No gradient
clipping (``--actor.max_norm 0``). ``lr / eps = 0.1`` makes the updates a few hundred bf16 ulps of the
weights, so rounding the saved bf16 weights costs well under 1% of ``|delta|``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from tests.openrlhf.e2e.fixtures import build_fixtures
from tests.openrlhf.e2e.runner import NO_KL_ARGS, Run, initial_weights, run_gmpo_openrlhf

LR, EPS = 10.0, 100.0
LR_OVER_EPS = LR / EPS
LINEAR_STEP_ARGS = ["--actor.adam.lr", str(LR), "--actor.adam.eps", str(EPS), "--actor.max_norm", "0", *NO_KL_ARGS]
MICRO_BATCH_SIZES = (4, 2, 1)  # 1, 2, 4 micro-batches of the 4-sample step
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


def step_args(loss: str, loss_agg_mode: str, micro_batch_size: int, extra: tuple = ()) -> list:
    return [
        "--actor.policy_loss_type",
        loss,
        "--actor.loss_agg_mode",
        loss_agg_mode,
        "--train.micro_batch_size",
        str(micro_batch_size),
        *LINEAR_STEP_ARGS,
        *extra,
    ]


def one_step(fixtures: dict, out: Path, loss: str, loss_agg_mode: str, micro_batch_size: int, extra: tuple = ()) -> Run:
    return run_gmpo_openrlhf(fixtures, out, step_args(loss, loss_agg_mode, micro_batch_size, extra), steps=1).check()


def update(run: Run, before: dict) -> dict:
    after = run.actor_weights()
    return {name: after[name].double() - before[name].double() for name in before}


def relative_difference(delta: dict, reference: dict) -> float:
    num = sum(float((delta[name] - reference[name]).pow(2).sum()) for name in reference)
    den = sum(float(reference[name].pow(2).sum()) for name in reference)
    return (num / den) ** 0.5


def table(fixtures: dict, root: Path, losses: tuple) -> list[dict]:
    """Rows ``{loss, loss_agg_mode, "micro-batches": {1: 0.0, 2: d2, 4: d4}, seconds}``."""
    before = initial_weights(fixtures["model"])
    rows = []
    for loss in losses:
        for mode in LOSS_AGG_MODES:
            runs = {
                4 // size: one_step(fixtures, root / f"{loss}-{mode}-{size}", loss, mode, size)
                for size in MICRO_BATCH_SIZES
            }
            reference = update(runs[1], before)
            rows.append(
                {
                    "loss": loss,
                    "loss_agg_mode": mode,
                    "micro-batches": {
                        n: relative_difference(update(run, before), reference) for n, run in runs.items()
                    },
                    "seconds": [round(run.seconds, 1) for run in runs.values()],
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs (created; must not exist)")
    parser.add_argument("--losses", nargs="+", default=["gmpo", "ppo", "gspo"])
    args = parser.parse_args()
    args.out.mkdir(parents=True)
    fixtures = build_fixtures(args.out / "fixtures")
    print("| loss | --actor.loss_agg_mode | 2 micro-batches | 4 micro-batches | s per run |")
    print("|---|---|---|---|---|")
    for row in table(fixtures, args.out, tuple(args.losses)):
        diffs = row["micro-batches"]
        print(
            f"| {row['loss']} | {row['loss_agg_mode']} | {diffs[2]:.2e} | {diffs[4]:.2e} | "
            f"{', '.join(map(str, row['seconds']))} |",
            flush=True,
        )


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
