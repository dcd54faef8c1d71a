"""Fixtures for the verl adapter tests (real verl 0.9.1 on CPU, nothing downloaded).

Figures measured by the tests (micro-batch invariance of ours vs verl's geo_mean) are
collected in ``FIGURES`` and printed in pytest's terminal summary.
"""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from . import engine  # noqa: E402

FIGURES: list[str] = []


def pytest_terminal_summary(terminalreporter) -> None:
    if FIGURES:
        terminalreporter.section("verl: measured figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def model():
    return engine.make_model()


@pytest.fixture(scope="session")
def rollout(model):
    return engine.make_rollout(model)


@pytest.fixture(scope="session")
def actor_config():
    """``actor_config(loss_mode, **actor_fields)``, composed once per distinct setting
    (verl's configs are frozen; ``global_batch_info`` is rewritten by every ppo_loss call)."""
    cache = {}

    def make(loss_mode: str, **fields):
        key = (loss_mode, tuple(sorted(fields.items())))
        if key not in cache:
            cache[key] = engine.make_actor_config(loss_mode, **fields)
        return cache[key]

    return make
