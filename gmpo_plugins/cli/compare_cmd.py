"""``gmpo-plugins compare``: short RL runs of several losses through several frameworks'
loss call paths on identical data, with a terminal table and a report folder.

    gmpo-plugins compare [--losses gmpo,grpo] [--frameworks core[,verl,openrlhf]]
                         [--steps N] [--model PATH] [--device cpu|cuda] [--seed S] [--out DIR]

Without --model a tiny GPT-2 is built from a config and warmed up on the toy task
(``gmpo_plugins.compare.task``); the initial model is saved to DIR/model-init so that
frameworks running in other virtualenvs start from exactly the same weights.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gmpo_plugins.cli.errors import UsageError

if TYPE_CHECKING:  # compare needs the [compare] extra: imported when the command runs (import_compare)
    from gmpo_plugins.compare.backends import LossBackend, Runner
    from gmpo_plugins.compare.trainer import RLConfig

DEFAULT_OUT = "gmpo-report"
HELP_DESCRIPTION = (
    "Short RL runs of several losses through several frameworks' loss call paths on identical data, "
    "with a terminal table and a report folder. Without --model a tiny GPT-2 is built from a config and "
    "warmed up on the toy task; the initial model is saved to OUT/model-init so that frameworks running "
    "in other virtualenvs start from exactly the same weights."
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare",
        help="run losses side by side through frameworks' loss paths on a toy RL task",
        description=HELP_DESCRIPTION,
    )
    parser.add_argument("--losses", default="gmpo,grpo", help="comma-separated registry losses (default gmpo,grpo)")
    from gmpo_plugins.compare.backends import FRAMEWORKS

    parser.add_argument(
        "--frameworks", default="core", help=f"comma-separated, among {', '.join(FRAMEWORKS)} (default core)"
    )
    parser.add_argument("--steps", type=int, default=None, help="RL steps per run (default 40)")
    parser.add_argument("--model", default=None, help="local Hugging Face model directory (default: built in code)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="default cpu")
    parser.add_argument("--seed", type=int, default=0, help="default 0")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"report folder (default ./{DEFAULT_OUT})")
    parser.set_defaults(run=run)


def split_names(value: str, option: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise UsageError(f"{option}: expected a comma-separated list of names, got {value!r}")
    return list(dict.fromkeys(names))


def check_out_dir(path: Path) -> None:
    """Create ``path`` and prove a file can be written there; UsageError otherwise."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out: cannot write to {str(path)!r}: {exc.strerror or exc}") from None


def import_compare():
    """The compare modules; UsageError naming the missing dependency otherwise."""
    try:
        import matplotlib  # noqa: F401
        import rich  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"compare needs {exc.name}: install it with `pip install 'gmpo-plugins[compare]'` "
            "(or run `python3 -m nox -s compare`)"
        ) from None


def command_line(args: argparse.Namespace, steps: int) -> str:
    """The command that reproduces this run, every option spelled out."""
    parts = ["gmpo-plugins", "compare", "--losses", args.losses, "--frameworks", args.frameworks]
    parts += ["--steps", str(steps), "--seed", str(args.seed), "--device", args.device, "--out", args.out]
    if args.model is not None:
        parts += ["--model", args.model]
    return " ".join(shlex.quote(part) for part in parts)


@dataclass
class Plan:
    """Validated options: what to run where."""

    losses: list[str]
    runners: dict[str, Runner]  # by framework
    backends: dict[str, LossBackend]  # by framework, for frameworks run in this process
    config: RLConfig
    out: Path


def make_plan(args: argparse.Namespace) -> Plan:
    """Check every option before anything runs or is written; UsageError on the first bad one."""
    import torch

    from gmpo_plugins.compare import backends
    from gmpo_plugins.compare.trainer import RLConfig
    from gmpo_plugins.core.registry import UnknownLossError, get_loss

    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps: expected an integer >= 1, got {args.steps}")
    losses = split_names(args.losses, "--losses")
    for name in losses:
        try:
            get_loss(name)
        except UnknownLossError as exc:
            raise UsageError(f"--losses: {exc}") from None
    runners, in_process = {}, {}
    try:
        for name in split_names(args.frameworks, "--frameworks"):
            runners[name] = backends.resolve_runner(name)
            if runners[name].in_process:
                in_process[name] = backends.load_backend(name)
                unsupported = [loss for loss in losses if not in_process[name].supports(loss)]
                if unsupported:
                    raise backends.BackendError(f"framework {name!r} does not support loss(es) {unsupported}")
    except backends.BackendError as exc:
        raise UsageError(f"--frameworks: {exc}") from None
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device: cuda requested but torch.cuda.is_available() is False")
    out = Path(args.out)
    check_out_dir(out)
    config = RLConfig(seed=args.seed, **({"steps": args.steps} if args.steps is not None else {}))
    return Plan(losses, runners, in_process, config, out)


def initial_model(args: argparse.Namespace, task, device, console):
    """(model, tokenizer, description): --model loaded as is, or the default model warmed up."""
    from gmpo_plugins.compare.model import ModelConfig, ModelLoadError, build_model, load_model, warm_up
    from gmpo_plugins.compare.task import build_char_tokenizer

    if args.model is not None:
        try:
            model, tokenizer = load_model(args.model)
        except ModelLoadError as exc:
            raise UsageError(str(exc)) from None
        return model, tokenizer, f"{args.model} (used as is, no warm-up)"
    tokenizer = build_char_tokenizer()
    config = ModelConfig()
    with console.status("building and warming up the default model"):
        model = build_model(tokenizer, config, args.seed).to(device)
        warm = warm_up(model, tokenizer, task, config, args.seed, device)
    console.print(f"warm-up: {warm.steps} steps, sampled success {warm.success:.2f}")
    size = sum(p.numel() for p in model.parameters())
    return (
        model,
        tokenizer,
        (
            f"GPT-2 from config, {size} parameters, warmed up {warm.steps} supervised steps "
            f"(sampled success at stop {warm.success:.2f})"
        ),
    )


def run(args: argparse.Namespace) -> int:
    import_compare()
    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gmpo_plugins.compare import backends, report
    from gmpo_plugins.compare.model import save_model
    from gmpo_plugins.compare.task import ReverseTask
    from gmpo_plugins.compare.trainer import train, use_one_cpu_thread

    plan = make_plan(args)
    console = Console(stderr=True)
    device = torch.device(args.device)
    use_one_cpu_thread(device)
    task = ReverseTask()
    started = time.perf_counter()
    model, tokenizer, model_description = initial_model(args, task, device, console)
    model_dir = plan.out / "model-init"
    save_model(model, tokenizer, model_dir)
    setup = {
        "model": model_description,
        "task": f"reverse {task.min_digits}-{task.max_digits} digit strings, binary exact-match reward",
        "rl": ", ".join(f"{k}={v}" for k, v in plan.config.to_dict().items()),
        "device": args.device,
        "frameworks": ", ".join(
            f"{name} ({'this process' if r.in_process else r.python})" for name, r in plan.runners.items()
        ),
    }

    def records_of(framework: str, loss_name: str):
        runner = plan.runners[framework]
        if runner.in_process:
            backend = plan.backends[framework]
            return train(model, tokenizer, task, backend, loss_name, plan.config, device, framework=framework)
        (plan.out / "logs").mkdir(exist_ok=True)
        return backends.run_in_subprocess(
            runner,
            loss_name=loss_name,
            model_dir=model_dir,
            config=plan.config.to_dict(),
            device=args.device,
            log_path=plan.out / "logs" / f"{framework}-{loss_name}.log",
        )

    records = []
    metrics_path = plan.out / "metrics.jsonl"
    metrics_path.write_text("")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TextColumn("{task.fields[status]}"), console=console) as progress:
        bar = progress.add_task("compare", total=plan.config.steps * len(plan.losses) * len(plan.runners), status="")
        for framework in plan.runners:
            for loss_name in plan.losses:
                progress.update(bar, description=f"{framework}/{loss_name}")
                try:
                    for record in records_of(framework, loss_name):
                        records.append(record)
                        report.append_metrics(metrics_path, record)
                        progress.update(bar, advance=1, status=f"reward {record['reward']:.2f}")
                except backends.RunFailed as exc:
                    progress.stop()
                    print(f"gmpo-plugins compare: error: {exc}", file=sys.stderr)
                    return 1

    rows = report.summarise(records)
    plots = report.write_plots(plan.out, records)
    command = command_line(args, plan.config.steps)
    report.write_markdown(plan.out / "report.md", rows, command=command, setup=setup, plots=plots)
    Console(width=None if console.is_terminal else 200).print(report.rich_table(rows))
    total = time.perf_counter() - started
    print(f"report: {plan.out / 'report.md'} (metrics.jsonl, {', '.join(plots)}); total {total:.0f} s")
    return 0
