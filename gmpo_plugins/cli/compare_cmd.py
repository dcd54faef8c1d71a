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
from pathlib import Path

from gmpo_plugins.cli.main import UsageError

DEFAULT_OUT = "gmpo-report"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare",
        help="run losses side by side through frameworks' loss paths on a toy RL task",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--losses", default="gmpo,grpo", help="comma-separated registry losses (default gmpo,grpo)")
    parser.add_argument("--frameworks", default="core", help="comma-separated frameworks (default core)")
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


def command_line(args: argparse.Namespace, config) -> str:
    """The command that reproduces this run, every option spelled out."""
    parts = ["gmpo-plugins", "compare", "--losses", args.losses, "--frameworks", args.frameworks]
    parts += ["--steps", str(config.steps), "--seed", str(args.seed), "--device", args.device, "--out", args.out]
    if args.model is not None:
        parts += ["--model", args.model]
    return " ".join(shlex.quote(part) for part in parts)


def run(args: argparse.Namespace) -> int:
    import_compare()
    import torch

    from gmpo_plugins.compare import backends, report
    from gmpo_plugins.compare.model import ModelConfig, ModelLoadError, build_model, load_model, save_model, warm_up
    from gmpo_plugins.compare.task import ReverseTask, build_char_tokenizer
    from gmpo_plugins.compare.trainer import RLConfig, train, use_one_cpu_thread
    from gmpo_plugins.core.registry import UnknownLossError, get_loss

    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps: expected an integer >= 1, got {args.steps}")
    losses = split_names(args.losses, "--losses")
    for name in losses:
        try:
            get_loss(name)
        except UnknownLossError as exc:
            raise UsageError(f"--losses: {exc}") from None
    frameworks = split_names(args.frameworks, "--frameworks")
    runners = {}
    in_process = {}
    try:
        for name in frameworks:
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

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    device = torch.device(args.device)
    use_one_cpu_thread(device)
    task = ReverseTask()
    config = RLConfig(seed=args.seed, **({"steps": args.steps} if args.steps is not None else {}))
    started = time.perf_counter()
    setup: dict[str, object] = {}
    if args.model is not None:
        try:
            model, tokenizer = load_model(args.model)
        except ModelLoadError as exc:
            raise UsageError(str(exc)) from None
        setup["model"] = f"{args.model} (used as is, no warm-up)"
    else:
        tokenizer = build_char_tokenizer()
        model_config = ModelConfig()
        with console.status("building and warming up the default model"):
            model = build_model(tokenizer, model_config, args.seed).to(device)
            warm = warm_up(model, tokenizer, task, model_config, args.seed, device)
        setup["model"] = (
            f"GPT-2 from config, {sum(p.numel() for p in model.parameters())} parameters, "
            f"warmed up {warm.steps} supervised steps (sampled success at stop {warm.success:.2f})"
        )
        console.print(f"warm-up: {warm.steps} steps, sampled success {warm.success:.2f}")
    model_dir = out / "model-init"
    save_model(model, tokenizer, model_dir)
    setup.update(
        {
            "task": f"reverse {task.min_digits}-{task.max_digits} digit strings, binary exact-match reward",
            "rl": ", ".join(f"{k}={v}" for k, v in config.to_dict().items()),
            "device": args.device,
            "frameworks": ", ".join(
                f"{name} ({'this process' if r.in_process else r.python})" for name, r in runners.items()
            ),
        }
    )

    records = []
    metrics_path = out / "metrics.jsonl"
    metrics_path.write_text("")
    logs = out / "logs"
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    ) as progress:
        bar = progress.add_task("compare", total=config.steps * len(losses) * len(frameworks), status="")
        for framework in frameworks:
            for loss_name in losses:
                progress.update(bar, description=f"{framework}/{loss_name}")
                runner = runners[framework]
                if runner.in_process:
                    stream = train(
                        model, tokenizer, task, in_process[framework], loss_name, config, device, framework=framework
                    )
                else:
                    logs.mkdir(exist_ok=True)
                    stream = backends.run_in_subprocess(
                        runner,
                        loss_name=loss_name,
                        model_dir=model_dir,
                        config=config.to_dict(),
                        device=args.device,
                        log_path=logs / f"{framework}-{loss_name}.log",
                    )
                try:
                    for record in stream:
                        records.append(record)
                        report.append_metrics(metrics_path, record)
                        progress.update(bar, advance=1, status=f"reward {record['reward']:.2f}")
                except backends.RunFailed as exc:
                    progress.stop()
                    print(f"gmpo-plugins compare: error: {exc}", file=sys.stderr)
                    return 1

    rows = report.summarise(records)
    plots = report.write_plots(out, records)
    report.write_markdown(out / "report.md", rows, command=command_line(args, config), setup=setup, plots=plots)
    Console(width=None if console.is_terminal else 200).print(report.rich_table(rows))
    total = time.perf_counter() - started
    print(f"report: {out / 'report.md'} (metrics.jsonl, {', '.join(plots)}); total {total:.0f} s")
    return 0
