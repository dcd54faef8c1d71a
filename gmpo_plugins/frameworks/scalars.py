"""Print every scalar of a TensorBoard log folder as JSON: ``{"tag": [[step, value], ...], ...}``.

    python -m gmpo_plugins.frameworks.scalars LOGDIR

Run with a framework's own interpreter, which has tensorboard (the gmpo-plugins driver need
not): the runner reads OpenRLHF's logged metrics through it. Every folder under LOGDIR with
an event file is read (OpenRLHF writes ``LOGDIR/<run name>/events.out.tfevents.*``); a tag's
points are in the order they were written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of every event file under ``logdir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict[str, list[tuple[int, float]]] = {}
    folders = sorted({path.parent for path in logdir.rglob("events.out.tfevents.*")})
    for folder in folders:
        accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            found.setdefault(tag, []).extend((event.step, event.value) for event in accumulator.Scalars(tag))
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m gmpo_plugins.frameworks.scalars LOGDIR", file=sys.stderr)
        return 2
    logdir = Path(argv[0])
    if not logdir.is_dir():
        print(f"{logdir}: no such folder", file=sys.stderr)
        return 1
    print(json.dumps(scalars(logdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
