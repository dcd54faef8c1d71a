"""Reading a compare report's metrics.jsonl in tests."""

import json
from pathlib import Path

from gmpo_plugins.compare.experiment.trainer import TIMING_KEYS

TIMING = set(TIMING_KEYS)


def read_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]
