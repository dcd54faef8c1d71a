"""The run spec's dataset (rows with ``prompt`` and ``answer``) in a framework's own format.

    python -m gmpo_plugins.frameworks.datasets verl|skyrl SRC DST.parquet

The prompt becomes one user message (every framework then applies the tokenizer's chat
template), the answer the ground truth its reward hook receives:

    verl    prompt (messages), data_source, reward_model.ground_truth, extra_info.index
    skyrl   prompt (messages), env_class, reward_spec.ground_truth

OpenRLHF reads the spec's file itself (``--data.input_key prompt --data.label_key answer``)
and the TRL script maps it with ``datasets``. Needs pandas (and pyarrow for parquet), which
the verl and SkyRL virtualenvs have.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DATA_SOURCE = "gmpo_plugins_run"
SKYRL_ENV = "gmpo_plugins_reward"
FORMATS = ("verl", "skyrl")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a .jsonl or .parquet file as dicts."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    import pandas as pd

    return list(pd.read_parquet(path).to_dict("records"))


def framework_row(fmt: str, index: int, row: dict[str, Any]) -> dict[str, Any]:
    """One row in the format ``fmt`` (module docstring)."""
    messages = [{"role": "user", "content": str(row["prompt"])}]
    answer = str(row["answer"])
    if fmt == "verl":
        return {
            "data_source": DATA_SOURCE,
            "prompt": messages,
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"index": index},
        }
    return {"prompt": messages, "env_class": SKYRL_ENV, "reward_spec": {"method": "rule", "ground_truth": answer}}


def convert(fmt: str, source: Path, target: Path) -> int:
    """Write ``source`` to ``target`` (parquet) in the format ``fmt``; returns the row count."""
    import pandas as pd

    if fmt not in FORMATS:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    rows = [framework_row(fmt, index, row) for index, row in enumerate(read_rows(source))]
    target.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(target)
    return len(rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[0] not in FORMATS:
        print(f"usage: python -m gmpo_plugins.frameworks.datasets {'|'.join(FORMATS)} SRC DST", file=sys.stderr)
        return 2
    count = convert(args[0], Path(args[1]), Path(args[2]))
    print(f"{count} rows -> {args[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
