r"""One (framework, loss) RL run in this interpreter, records on stdout.

    python -m gmpo_plugins.compare.run_one --framework verl --loss gmpo \\
        --model REPORT/model-init --device cpu --config '{"steps": 30, ...}'

Run by ``gmpo-plugins compare`` inside a framework's own virtualenv (see
``gmpo_plugins.compare.backends``). Each step prints one line
``RECORD_PREFIX + json(record)``; anything else on stdout is treated as log output.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

import torch

from gmpo_plugins.compare.backends import RECORD_PREFIX, load_backend
from gmpo_plugins.compare.model import load_model
from gmpo_plugins.compare.task import ReverseTask
from gmpo_plugins.compare.trainer import RLConfig, train, use_one_cpu_thread


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmpo_plugins.compare.run_one")
    parser.add_argument("--framework", required=True)
    parser.add_argument("--loss", required=True)
    parser.add_argument("--model", required=True, help="model directory written by gmpo-plugins compare")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--config", required=True, help="RLConfig as JSON")
    args = parser.parse_args(argv)
    config = RLConfig(**json.loads(args.config))
    use_one_cpu_thread(torch.device(args.device))
    model, tokenizer = load_model(args.model)
    backend = load_backend(args.framework)
    records = train(
        model, tokenizer, ReverseTask(), backend, args.loss, config, torch.device(args.device), framework=args.framework
    )
    for record in records:
        print(RECORD_PREFIX + json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
