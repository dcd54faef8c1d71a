r"""One (framework, loss) RL run in this interpreter, records on stdout.

    python -m gmpo_plugins.compare.experiment.run_one --framework verl --loss gmpo --task repeat \\
        --model REPORT/model-init/seed-0 --device cpu --config '{"steps": 30, ...}'
    python -m gmpo_plugins.compare.experiment.run_one --framework verl --check-losses gmpo,grpo

Run by ``gmpo-plugins compare`` inside a framework's own virtualenv (see
``gmpo_plugins.compare.backends.base``). Each step prints one line
``RECORD_PREFIX + json(record)``; anything else on stdout is treated as log output.
``--check-losses`` only loads the framework's backend and prints
``SUPPORT_PREFIX + json(list of the given losses it does not support)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import torch

from gmpo_plugins.compare.backends.base import RECORD_PREFIX, SUPPORT_PREFIX, load_backend
from gmpo_plugins.compare.experiment.model import load_model
from gmpo_plugins.compare.experiment.task import make_task
from gmpo_plugins.compare.experiment.trainer import RLConfig, train, use_one_cpu_thread


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gmpo_plugins.compare.experiment.run_one")
    parser.add_argument("--framework", required=True)
    parser.add_argument("--check-losses", default=None, help="comma-separated losses: print the unsupported ones")
    parser.add_argument("--loss")
    parser.add_argument("--task", default="repeat")
    parser.add_argument("--model", help="model directory written by gmpo-plugins compare")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--config", help="RLConfig as JSON")
    args = parser.parse_args(argv)
    backend = load_backend(args.framework)
    if args.check_losses is not None:
        unsupported = [name for name in args.check_losses.split(",") if not backend.supports(name)]
        print(SUPPORT_PREFIX + json.dumps(unsupported), flush=True)
        return 0
    if args.loss is None or args.model is None or args.config is None:
        parser.error("--loss, --model and --config are required for a run")
    config = RLConfig(**json.loads(args.config))
    use_one_cpu_thread(torch.device(args.device))
    model, tokenizer = load_model(args.model)
    task = make_task(args.task)
    records = train(
        model, tokenizer, task, backend, args.loss, config, torch.device(args.device), framework=args.framework
    )
    for record in records:
        print(RECORD_PREFIX + json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
