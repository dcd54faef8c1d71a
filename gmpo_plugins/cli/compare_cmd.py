"""``gmpo-plugins compare``: short RL runs of several losses through several frameworks'
loss call paths, over several seeds, on identical data; a terminal summary and a report folder.

    gmpo-plugins compare [--losses gmpo,grpo_clip_wider,grpo] [--frameworks core[,verl,openrlhf,trl]]
                         [--task repeat|reverse] [--seeds N|a-b] [--steps N] [--eval-every K]
                         [--model PATH] [--device cpu|cuda] [--out DIR] [--force]

Every (framework, loss, seed) is run. Per seed the default model (a tiny GPT-2 built from a
config) is initialised from the seed and warmed up once, then every loss of every
framework starts from that same model and sees the same first rollout. The warmed-up model
of seed S is saved to DIR/model-init/seed-S, so frameworks running in other virtualenvs
start from exactly the same weights. DIR must not hold a previous report unless --force.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gmpo_plugins.cli.errors import UsageError

if TYPE_CHECKING:  # compare needs the [compare] extra: imported when the command runs (import_compare)
    from gmpo_plugins.compare.backends.base import LossBackend, Runner
    from gmpo_plugins.compare.experiment.task import Task
    from gmpo_plugins.compare.experiment.trainer import RLConfig

DEFAULT_OUT = "gmpo-report"
DEFAULT_LOSSES = "gmpo,grpo_clip_wider,grpo"
DEFAULT_SEEDS = 8
MAX_SEED = 2**31 - 1
MAX_SEED_COUNT = 1000
INTERRUPTED_STATUS = 130


def add_parser(commands: argparse._SubParsersAction) -> None:
    from gmpo_plugins.compare.backends.base import FRAMEWORKS
    from gmpo_plugins.compare.experiment.task import DEFAULT_TASK, TASKS

    parser = commands.add_parser(
        "compare",
        help="run losses side by side through frameworks' loss paths on a toy RL task, over several seeds",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    parser.add_argument(
        "--losses",
        default=DEFAULT_LOSSES,
        help="comma-separated registry losses, or grpo_clip_wider (grpo at GMPO's ratio band e^+-0.4); "
        f"default {DEFAULT_LOSSES}",
    )
    parser.add_argument(
        "--frameworks", default="core", help=f"comma-separated, from {', '.join(FRAMEWORKS)} (default core)"
    )
    parser.add_argument("--task", default=DEFAULT_TASK, help=f"one of {', '.join(TASKS)} (default {DEFAULT_TASK})")
    parser.add_argument(
        "--seeds",
        default=None,
        help=f"N (seeds 0..N-1) or a range a-b, inclusive (default {DEFAULT_SEEDS}: seeds 0-{DEFAULT_SEEDS - 1})",
    )
    parser.add_argument("--seed", type=int, default=None, help="one seed S (the same as --seeds S-S)")
    parser.add_argument("--steps", type=int, default=None, help="RL steps per run (default 40)")
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="RL Adam learning rate (default: the task's, 1.5e-4 for both)",
    )
    parser.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every K steps (default 10)")
    parser.add_argument("--model", default=None, help="local Hugging Face model directory (default: built in code)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="default cpu")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"report folder (default ./{DEFAULT_OUT})")
    parser.add_argument("--force", action="store_true", help="replace the report already in --out")
    parser.set_defaults(run=run)


def split_names(value: str, option: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise UsageError(f"{option}: expected a comma-separated list of names, got {value!r}")
    return list(dict.fromkeys(names))


def parse_seeds(seeds: str | None, seed: int | None) -> list[int]:
    """The seeds to run from ``--seeds`` (``N`` or ``a-b``) or ``--seed``; UsageError otherwise."""
    if seeds is not None and seed is not None:
        raise UsageError("--seed: give either --seed S or --seeds N|a-b, not both")
    if seed is not None:
        if not 0 <= seed <= MAX_SEED:
            raise UsageError(f"--seed: expected an integer in [0, {MAX_SEED}], got {seed}")
        return [seed]
    if seeds is None:
        return list(range(DEFAULT_SEEDS))
    expected = f"expected a count N >= 1 (seeds 0..N-1) or a range a-b with 0 <= a <= b <= {MAX_SEED}"
    option = "--seeds"
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", seeds)
    if match is None:
        raise UsageError(f"{option}: {expected}, got {seeds!r}")
    if match.group(2) is None:
        count = int(match.group(1))
        if not 1 <= count <= MAX_SEED_COUNT:
            raise UsageError(f"{option}: a count must be in [1, {MAX_SEED_COUNT}], got {count}")
        return list(range(count))
    first, last = int(match.group(1)), int(match.group(2))
    if first > last or last > MAX_SEED:
        raise UsageError(f"{option}: {expected}, got {seeds!r}")
    if last - first + 1 > MAX_SEED_COUNT:
        raise UsageError(f"{option}: at most {MAX_SEED_COUNT} seeds, got {last - first + 1}")
    return list(range(first, last + 1))


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


def command_line(args: argparse.Namespace, plan: Plan) -> str:
    """The command that reproduces this run, every option spelled out."""
    seeds = f"{plan.seeds[0]}-{plan.seeds[-1]}"
    parts = ["gmpo-plugins", "compare", "--losses", ",".join(plan.losses), "--frameworks", ",".join(plan.runners)]
    parts += ["--task", plan.task.name, "--seeds", seeds, "--steps", str(plan.config.steps)]
    parts += ["--lr", str(plan.config.lr), "--eval-every", str(plan.config.eval_every)]
    parts += ["--device", args.device, "--out", args.out]
    if args.model is not None:
        parts += ["--model", args.model]
    return " ".join(shlex.quote(part) for part in parts)


@dataclass
class Plan:
    """Validated options: what to run where."""

    losses: list[str]
    runners: dict[str, Runner]  # by framework
    backends: dict[str, LossBackend]  # by framework, for frameworks run in this process
    config: RLConfig  # seed 0: each run replaces it
    seeds: list[int]
    task: Task
    out: Path
    given_model: tuple | None  # (model, tokenizer) loaded from --model, None: the default model


def check_support(losses: list[str], frameworks: list[str]) -> tuple[dict[str, Runner], dict[str, LossBackend]]:
    """(runners, in-process backends); BackendError when a framework cannot run a loss.
    Out-of-process frameworks are asked in their own interpreter."""
    from gmpo_plugins.compare.backends import base
    from gmpo_plugins.compare.experiment.settings import registry_name

    runners: dict[str, Runner] = {}
    in_process: dict[str, LossBackend] = {}
    for name in frameworks:
        runners[name] = base.resolve_runner(name)
        if runners[name].in_process:
            in_process[name] = base.load_backend(name)
            unsupported = [loss for loss in losses if not in_process[name].supports(registry_name(loss))]
        else:
            asked = list(dict.fromkeys(registry_name(loss) for loss in losses))
            unsupported = base.check_in_subprocess(runners[name], asked)
        if unsupported:
            raise base.BackendError(f"framework {name!r} does not support loss(es) {unsupported}")
    return runners, in_process


def check_options(args: argparse.Namespace) -> tuple[list[int], Task, list[str]]:
    """(seeds, task, losses): the options that need no optional dependency, checked before
    ``import_compare``, so that a bad value is reported even where transformers is missing;
    UsageError on the first bad one."""
    from gmpo_plugins.compare.experiment.settings import registry_name
    from gmpo_plugins.compare.experiment.task import make_task
    from gmpo_plugins.core.registry import UnknownLossError, get_loss

    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps: expected an integer >= 1, got {args.steps}")
    if args.lr is not None and not 0 < args.lr < 1:
        raise UsageError(f"--lr: expected a number in (0, 1), got {args.lr}")
    if args.eval_every is not None and args.eval_every < 1:
        raise UsageError(f"--eval-every: expected an integer >= 1, got {args.eval_every}")
    seeds = parse_seeds(args.seeds, args.seed)
    try:
        task = make_task(args.task)
    except ValueError as exc:
        raise UsageError(f"--task: {exc}") from None
    losses = split_names(args.losses, "--losses")
    for name in losses:
        try:
            get_loss(registry_name(name))
        except UnknownLossError as exc:
            raise UsageError(f"--losses: {exc}") from None
    return seeds, task, losses


def make_plan(args: argparse.Namespace) -> Plan:
    """Check every option before anything runs or is written; UsageError on the first bad one."""
    import torch

    from gmpo_plugins.compare.backends import base
    from gmpo_plugins.compare.experiment.trainer import RLConfig
    from gmpo_plugins.compare.report import outdir

    seeds, task, losses = check_options(args)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device: cuda requested but torch.cuda.is_available() is False")
    try:
        runners, in_process = check_support(losses, split_names(args.frameworks, "--frameworks"))
    except base.BackendError as exc:
        raise UsageError(f"--frameworks: {exc}") from None
    given_model = None
    if args.model is not None:
        from gmpo_plugins.compare.experiment.model import ModelLoadError, load_model

        try:
            given_model = load_model(args.model)
        except ModelLoadError as exc:
            raise UsageError(str(exc)) from None
    out = Path(args.out)
    try:
        outdir.prepare(out, force=args.force)
    except outdir.OutDirError as exc:
        raise UsageError(str(exc)) from None
    options = {"steps": args.steps, "eval_every": args.eval_every, "lr": args.lr or task.rl_lr}
    config = RLConfig(**{key: value for key, value in options.items() if value is not None})
    return Plan(losses, runners, in_process, config, seeds, task, out, given_model)


def initial_model(args: argparse.Namespace, plan: Plan, seed: int, device, console):
    """(model, tokenizer, description, warm-up note) of one seed: --model as is, or the default
    model initialised from ``seed`` and warmed up."""
    from gmpo_plugins.compare.experiment.model import ModelConfig, build_model, warm_up
    from gmpo_plugins.compare.experiment.task import build_char_tokenizer

    if plan.given_model is not None:
        model, tokenizer = plan.given_model
        return model.to(device), tokenizer, f"{args.model} (used as is, no warm-up)", "none"
    tokenizer = build_char_tokenizer()
    config = ModelConfig()
    model = build_model(tokenizer, config, seed).to(device)
    warm = warm_up(model, tokenizer, plan.task, config, seed, device)
    note = f"seed {seed}: {warm.steps} steps, sampled success {warm.success:.2f}"
    console.print(f"warm-up {note}")
    size = sum(p.numel() for p in model.parameters())
    return model, tokenizer, f"GPT-2 from config, {size} parameters, initialised and warmed up per seed", note


def run(args: argparse.Namespace) -> int:
    from gmpo_plugins.compare.backends import base

    try:
        return run_plan(args)
    except KeyboardInterrupt:
        out = Path(args.out)
        where = f"; {out} is incomplete (see {out / 'INCOMPLETE'})" if (out / "INCOMPLETE").exists() else ""
        print(f"gmpo-plugins compare: interrupted{where}", file=sys.stderr)
        return INTERRUPTED_STATUS
    except base.RunFailed as exc:
        print(f"gmpo-plugins compare: error: {exc}", file=sys.stderr)
        return 1


def run_plan(args: argparse.Namespace) -> int:
    check_options(args)
    import_compare()
    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gmpo_plugins.compare.backends import base
    from gmpo_plugins.compare.experiment.model import save_model
    from gmpo_plugins.compare.experiment.trainer import train, use_one_cpu_thread
    from gmpo_plugins.compare.report import outdir, writer

    plan = make_plan(args)
    command = command_line(args, plan)
    outdir.mark_incomplete(plan.out, command)
    console = Console(stderr=True)
    device = torch.device(args.device)
    use_one_cpu_thread(device)
    started, cpu_started = time.perf_counter(), time.process_time()
    metrics_path = plan.out / "metrics.jsonl"
    metrics_path.write_text("")
    warmups, description = [], ""
    records = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    total = plan.config.steps * len(plan.losses) * len(plan.runners) * len(plan.seeds)
    with Progress(*columns, TextColumn("{task.fields[status]}"), console=console) as progress:
        bar = progress.add_task("compare", total=total, status="")
        for seed in plan.seeds:
            progress.update(bar, description=f"seed {seed}: warm-up")
            model, tokenizer, description, note = initial_model(args, plan, seed, device, console)
            warmups.append(note)
            model_dir = plan.out / "model-init" / f"seed-{seed}"
            save_model(model, tokenizer, model_dir)
            config = plan.config.__class__(**{**plan.config.to_dict(), "seed": seed})
            for framework, runner in plan.runners.items():
                for loss_name in plan.losses:
                    progress.update(bar, description=f"seed {seed} {framework}/{loss_name}")
                    if runner.in_process:
                        stream = train(
                            model, tokenizer, plan.task, plan.backends[framework], loss_name, config, device,
                            framework=framework,
                        )  # fmt: skip
                    else:
                        (plan.out / "logs").mkdir(exist_ok=True)
                        stream = base.run_in_subprocess(
                            runner,
                            loss_name=loss_name,
                            task=plan.task.name,
                            model_dir=model_dir,
                            config=config.to_dict(),
                            device=args.device,
                            log_path=plan.out / "logs" / f"{framework}-{loss_name}-seed-{seed}.log",
                        )
                    with closing(stream):
                        for record in stream:
                            records.append(record)
                            writer.append_metrics(metrics_path, record)
                            if record["step"] > 0:
                                progress.update(bar, advance=1, status=f"reward {record['reward']:.2f}")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    setup = {
        "task": plan.task.describe(),
        "held-out prompts": f"{len(plan.task.held_out())} fixed prompts, never sampled in warm-up or training",
        "model": description,
        "warm-up (supervised, until the task's target share of right sampled completions)": "; ".join(warmups),
        "seeds": f"{len(plan.seeds)} ({plan.seeds[0]}-{plan.seeds[-1]})",
        "rl": ", ".join(f"{k}={v}" for k, v in plan.config.to_dict().items() if k != "seed"),
        "device": args.device,
        "frameworks": ", ".join(
            f"{name} ({'this process' if r.in_process else r.python})" for name, r in plan.runners.items()
        ),
        "time": f"{wall:.0f} s wall, {cpu:.0f} s CPU of this process (warm-ups included)",
    }
    result = writer.build(records, plan.losses)
    plots = writer.write_plots(plan.out, records, plan.losses)
    writer.write_markdown(plan.out / "report.md", result, command=command, setup=setup, plots=plots)
    outdir.mark_complete(plan.out)
    out_console = Console(width=None if console.is_terminal else 200)
    for table in writer.rich_tables(result):
        out_console.print(table)
    print(f"report: {plan.out / 'report.md'} (metrics.jsonl, {', '.join(plots)}); total {wall:.0f} s")
    return 0
