"""Shared fixtures: one 2-step default compare run, reused by several tests."""

import json
from pathlib import Path

import pytest

from gmpo_plugins.cli.main import main
from gmpo_plugins.compare.trainer import TIMING_KEYS

TIMING = set(TIMING_KEYS)


def read_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


@pytest.fixture(scope="session")
def two_step_report(tmp_path_factory) -> Path:
    """``gmpo-plugins compare --steps 2`` with every other option at its default."""
    out = tmp_path_factory.mktemp("report")
    assert main(["compare", "--steps", "2", "--out", str(out)]) == 0
    return out
