"""Fixtures of the verl end-to-end tests: the task's assets, and every trainer run of the
session done once, in one batch driver (``harness.run_batch``), shared by the tests.

Figures measured by the tests (the invariance table, run times) are collected in
``FIGURES`` and printed in pytest's terminal summary.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

import pytest

pytest.importorskip("verl")

from . import harness  # noqa: E402
from .harness import ACTOR, Run, loss, split  # noqa: E402

sys.path.insert(0, harness.EXAMPLES)

FIGURES: list[str] = []
SELECTED_RUNS: set[str] = set()


def pytest_collection_finish(session) -> None:
    """The trainer runs the selected tests read: each test module's ``RUNS`` (so that a session
    running part of the folder makes only its part of the runs)."""
    for item in session.items:
        SELECTED_RUNS.update(getattr(item.module, "RUNS", ()))


def pytest_terminal_summary(terminalreporter) -> None:
    if FIGURES:
        terminalreporter.section("verl end to end: measured figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


LEGACY = "trainer.use_v1=false"  # verl's deprecated legacy trainer (RayPPOTrainer), kept while verl ships it
ROLLOUT_LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=true"  # rollout_log_probs for the corrections
CORRECTION = "algorithm.rollout_correction"
DECOUPLED = [  # token IS truncated at 2, token rejection outside [0.5, 2]
    ROLLOUT_LOG_PROBS,
    f"{CORRECTION}.rollout_is=token",
    f"{CORRECTION}.rollout_is_threshold=2.0",
    f"{CORRECTION}.rollout_rs=token_k1",
    f"{CORRECTION}.rollout_rs_threshold='0.5_2.0'",
]
BYPASS = [ROLLOUT_LOG_PROBS, f"{CORRECTION}.bypass_mode=true"]


def planned_runs(base: list[str]) -> list[Run]:
    """The session's trainer runs (names are used by the tests), all through verl's default v1
    trainer but ``legacy_decoupled`` (verl's deprecated legacy trainer, one smoke run). ``gmpo_mb1`` is the
    baseline of the split runs, and of split_dependent_gmpo's (with one micro-batch it is gmpo).
    ``nonfinite`` feeds gmpo one NaN advantage per micro-batch (nonfinite_loss.py).

    Settings that share a run: ``gmpo_mb2`` also runs rollout correction's bypass mode and
    ``gmpo_mb4`` its decoupled mode, with ``recorded_gmpo`` (gmpo that saves what verl passes
    it: recording_loss.py). The CPU rollout server samples from the same float32 weights as the
    actor, so the rollout and actor log-probs agree to rounding (measured below 3e-7): the IS
    weights are 1 and the ratios against the rollout log-probs 1 to that rounding, nothing is
    rejected, and the invariance tolerance still holds.
    """
    gmpo = loss("gmpo")
    recorded = loss("recorded_gmpo")
    return [
        Run("gmpo_mb1", base + gmpo + split(1) + ["trainer.total_training_steps=2"]),
        Run("gmpo_mb2", base + recorded + split(2) + BYPASS),
        Run("gmpo_mb4", base + recorded + split(4) + DECOUPLED),
        Run("gmpo_dp2", base + gmpo + split(ranks=2)),
        Run("split_dependent_mb4", base + loss("split_dependent_gmpo") + split(4)),
        Run(
            "gspo",
            base
            + loss("gmpo_plugins.gspo")
            + split(2)
            + [f"{ACTOR}.clip_ratio_low=0.0003", f"{ACTOR}.clip_ratio_high=0.0004"],
        ),
        Run(
            "dapo",
            base
            + loss("dapo")
            + split(2)
            + [f"{ACTOR}.clip_ratio_low=0.2", f"{ACTOR}.clip_ratio_high=0.28", f"{ACTOR}.loss_agg_mode=token-mean"],
        ),
        Run("legacy_decoupled", base + recorded + split(2) + DECOUPLED + [LEGACY]),
        Run("nonfinite", base + loss("nonfinite_gmpo") + split(2)),
    ]


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("verl_e2e"))


@pytest.fixture(scope="session")
def assets(workdir):
    with warnings.catch_warnings():
        # the stand-ins import verl's rollout replica, which imports Ray's state API from its
        # deprecated location: Ray's DeprecationWarning, raised at import; and verl's v1 trainer,
        # whose engine package warns for each optional engine it lacks (torchtitan, megatron, ...)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
        from verl_cpu import assets as task  # examples/ is put on sys.path above

    return task.build(os.path.join(workdir, "assets"))


@pytest.fixture(scope="session")
def trainer_runs(workdir, assets) -> dict[str, Run]:
    """The planned runs the selected tests read (``SELECTED_RUNS``), done once in one driver process
    (one Ray start-up for all); a run that failed is reported by the test that reads it."""
    ray_dir = tempfile.mkdtemp(prefix="ray_", dir="/tmp")  # Ray's socket paths must stay short
    planned = planned_runs(harness.common_overrides(assets, workdir, ray_dir))
    unknown = SELECTED_RUNS - {run.name for run in planned}
    assert not unknown, f"RUNS of a test module names runs that planned_runs does not plan: {sorted(unknown)}"
    runs = [run for run in planned if run.name in SELECTED_RUNS]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([harness.HERE, harness.EXAMPLES, env.get("PYTHONPATH", "")])
    env["VERL_USE_EXTERNAL_MODULES"] = "split_dependent_loss,recording_loss,nonfinite_loss"
    _, wall = harness.run_batch(runs, workdir, env)
    FIGURES.append(
        f"trainer runs: {len(runs)} in one driver, {wall:.0f} s wall; per run (s): "
        + ", ".join(f"{run.name} {run.seconds:.0f}" for run in runs)
    )
    FIGURES.append(f"batch log: {os.path.join(workdir, 'batch.log')}")
    return {run.name: run for run in runs}
