"""Fixtures of the SkyRL end-to-end tests: the task's assets, and every trainer run of the
session done once, in one Ray session (``harness.run_batch``), shared by the tests.

Figures measured by the tests (the invariance table, run times) are collected in ``FIGURES``
and printed in pytest's terminal summary.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("skyrl.train.entrypoints.main_base")

from . import assets, harness  # noqa: E402
from .harness import loss, split  # noqa: E402

FIGURES: list[str] = []
# the whole batch of runs; ~2-3 minutes on 2 cores
BATCH_TIMEOUT_S = 900


def pytest_terminal_summary(terminalreporter) -> None:
    if FIGURES:
        terminalreporter.section("SkyRL end to end: measured figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


def planned_runs() -> dict[str, list[str]]:
    """The session's trainer runs (names are used by the tests): gmpo and SkyRL's own gspo under
    1, 2 and 4 micro-batches and 2 ranks, and the split-dependent loss under 4 micro-batches.
    ``gmpo_mb1`` runs 2 steps (the two-step test); the others one. ``nonfinite`` feeds gmpo one NaN
    advantage per micro-batch (nonfinite_loss.py)."""
    runs = {"gmpo_mb1": loss("gmpo") + split(1) + ["trainer.max_training_steps=2"]}
    for name in ("gmpo", "gspo"):
        if name == "gspo":
            runs["gspo_mb1"] = loss("gspo") + split(1)
        runs[f"{name}_mb2"] = loss(name) + split(2)
        runs[f"{name}_mb4"] = loss(name) + split(4)
        runs[f"{name}_dp2"] = loss(name) + split(ranks=2)
    runs["split_dependent_mb4"] = loss("split_dependent_gmpo") + split(4)
    runs["nonfinite"] = loss("nonfinite_gmpo") + split(1)
    return runs


@pytest.fixture(scope="session")
def task(tmp_path_factory) -> dict[str, str]:
    """The tiny model and prompt file (``assets.build``)."""
    return assets.build(str(tmp_path_factory.mktemp("skyrl_task")))


@pytest.fixture(scope="session")
def base(task, tmp_path_factory) -> list[str]:
    """The overrides every run shares."""
    return harness.base_overrides(task["model"], task["train"], str(tmp_path_factory.mktemp("skyrl_out")))


@pytest.fixture(scope="session")
def runs(base, tmp_path_factory) -> dict[str, harness.Run]:
    """Every planned run, done once."""
    out = str(tmp_path_factory.mktemp("skyrl_runs"))
    done = harness.run_batch(planned_runs(), base, out, BATCH_TIMEOUT_S)
    FIGURES.append("wall time per run (s): " + ", ".join(f"{n} {r.wall_s:.1f}" for n, r in done.items()))
    return done


@pytest.fixture(scope="session")
def initial_params(task) -> dict:
    """The model's parameters before training."""
    from safetensors.torch import load_file

    return load_file(os.path.join(task["model"], "model.safetensors"))
