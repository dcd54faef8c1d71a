"""``gmpo-plugins bench``: forward+backward time and peak extra memory of registry losses.

    gmpo-plugins bench [--losses gmpo,grpo] [--shapes 64x1024,256x4096,512x8192]
                       [--dtypes fp32,bf16] [--device cpu|cuda] [--repeats N]
                       [--threads N] [--json PATH] [--markdown] [--targets]
    gmpo-plugins bench --fused-linear [VxH,...] [--fused-tokens BxT] [--fused-chunk N]
                       [--fused-import-path DIR] [--device cpu|cuda] [--repeats N]
                       [--threads N] [--json PATH]

Each loss runs fused (the registry path) and, where it has one, eager (the oracle),
next to verl's built-in geo_mean (when verl is importable) and the floor; see
``gmpo_plugins.bench``. The output starts with the command that reproduces the run
(output options aside), and ends with every target the run can judge, met or not
(``--targets``: only those). Bad values (an unwritable --json path included, checked before
the benchmark runs): one line on stderr, exit status 2. A loss whose call raises (a broken
plugin) is reported as failed, the others are measured, and the exit status is 1.

``--fused-linear`` runs only the fused-linear section instead (``gmpo_plugins.bench.fused_linear``:
log-probs and the loss from hidden states and the lm_head by the unfused path,
``fused_linear_loss``, TRL's ``ChunkedLogProbFunction``, verl's ``FusedLinearForPPO`` and
Liger-Kernel, each where installed, at each V x H, default 32768x1024,151936x1024, 4x1024
positions) and prints its Markdown tables. ``--fused-import-path`` appends directories to
``sys.path`` first (after the environment's own packages), so that a framework installed in
another environment is measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

DEFAULT_SHAPES = "64x1024,256x4096,512x8192"
DEFAULT_HEADS = "32768x1024,151936x1024"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("bench", help="time and memory of the losses' forward+backward")
    parser.add_argument("--losses", default=None, help="comma-separated loss names (default: all registered)")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma-separated BxT (default {DEFAULT_SHAPES})")
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated among fp32, bf16, fp16, fp64")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--repeats", default="5", help="timed calls per measurement (median), default 5")
    parser.add_argument("--threads", default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables instead of rich ones")
    parser.add_argument("--targets", action="store_true", help="print only the targets table (the JSON has all)")
    parser.add_argument(
        "--fused-linear",
        nargs="?",
        const=DEFAULT_HEADS,
        default=None,
        metavar="VxH,...",
        help=f"run only the fused-linear section at these vocab x hidden sizes (default {DEFAULT_HEADS})",
    )
    parser.add_argument("--fused-tokens", default="4x1024", help="BxT positions of the fused-linear section (4x1024)")
    parser.add_argument(
        "--fused-chunk", default=None, help="positions per chunk of fused_linear_loss (default: its own default)"
    )
    parser.add_argument(
        "--fused-import-path",
        default=None,
        metavar="DIR[,DIR]",
        help="directories appended to sys.path before the fused-linear paths are imported",
    )
    parser.set_defaults(run=run)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _positive_int(name: str, text: str, usage_error) -> int:
    if not re.fullmatch(r"\s*\d+\s*", str(text)) or int(text) < 1:
        raise usage_error(f"{name} must be a positive integer, got {text!r}")
    return int(text)


def _check_writable(path: str, usage_error) -> None:
    """UsageError unless ``path`` can be written, checked before the benchmark runs."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise usage_error(f"--json: directory {parent!r} does not exist")
    if os.path.isdir(path):
        raise usage_error(f"--json: {path!r} is a directory, expected a file path")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise usage_error(f"--json: {path!r} is not writable")
    if not os.path.exists(path) and not os.access(parent, os.W_OK | os.X_OK):
        raise usage_error(f"--json: directory {parent!r} is not writable")


def parse_config(args: argparse.Namespace):
    """BenchConfig from the command line; UsageError naming the bad option."""
    import torch

    from gmpo_plugins.bench.runner import DTYPES, BenchConfig
    from gmpo_plugins.cli.errors import UsageError
    from gmpo_plugins.core.registry import UnknownLossError, list_losses

    losses = [spec.name for spec in list_losses()] if args.losses is None else _items(args.losses)
    if not losses:
        raise UsageError(f"--losses: expected comma-separated loss names, got {args.losses!r}")
    for name in losses:
        try:
            from gmpo_plugins.core.registry import get_loss

            get_loss(name)
        except UnknownLossError as exc:
            raise UsageError(f"--losses: {exc}") from None
    shapes = []
    for item in _items(args.shapes):
        match = re.fullmatch(r"(\d+)x(\d+)", item)
        if not match or min(int(match[1]), int(match[2])) < 1:
            raise UsageError(f"--shapes: expected comma-separated BxT with B, T >= 1 (e.g. 64x1024), got {item!r}")
        shapes.append((int(match[1]), int(match[2])))
    if not shapes:
        raise UsageError("--shapes: expected at least one BxT")
    dtypes = _items(args.dtypes)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise UsageError(f"--dtypes: expected comma-separated values among {list(DTYPES)}, got {args.dtypes!r}")
    if args.device not in ("cpu", "cuda"):
        raise UsageError(f"--device: expected cpu or cuda, got {args.device!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device: cuda requested but torch.cuda.is_available() is False")
    repeats = _positive_int("--repeats", args.repeats, UsageError)
    if args.threads is not None:
        torch.set_num_threads(_positive_int("--threads", args.threads, UsageError))
    if args.json is not None:
        _check_writable(args.json, UsageError)
    return BenchConfig(losses=losses, shapes=shapes, dtypes=dtypes, device=args.device, repeats=repeats)


def command_line(config, args: argparse.Namespace) -> str:
    """The command that repeats the measurements of ``config`` (every option explicit,
    except ``--losses`` when it is all registered losses), with the output options that
    shape what is printed (``--markdown``, ``--targets``), not ``--json``'s path."""
    import torch

    from gmpo_plugins.core.registry import list_losses

    parts = ["gmpo-plugins bench"]
    if config.losses != [spec.name for spec in list_losses()]:
        parts.append("--losses " + ",".join(config.losses))
    parts += [
        "--shapes " + ",".join(f"{b}x{t}" for b, t in config.shapes),
        "--dtypes " + ",".join(config.dtypes),
        f"--device {config.device}",
        f"--repeats {config.repeats}",
    ]
    if args.threads is not None:
        parts.append(f"--threads {torch.get_num_threads()}")
    parts += [flag for flag, given in (("--markdown", args.markdown), ("--targets", args.targets)) if given]
    return " ".join(parts)


def _pairs(option: str, text: str, usage_error) -> list[tuple[int, int]]:
    pairs = []
    for item in _items(text):
        match = re.fullmatch(r"(\d+)x(\d+)", item)
        if not match or min(int(match[1]), int(match[2])) < 1:
            raise usage_error(f"{option}: expected comma-separated AxB with A, B >= 1, got {item!r}")
        pairs.append((int(match[1]), int(match[2])))
    if not pairs:
        raise usage_error(f"{option}: expected at least one AxB")
    return pairs


def run_fused_linear_section(args: argparse.Namespace) -> int:
    """``--fused-linear``: the section's tables, preceded by the command and the machine."""
    import torch

    from gmpo_plugins.bench.fused_linear import run_fused_linear, to_markdown
    from gmpo_plugins.bench.runner import _machine
    from gmpo_plugins.cli.errors import UsageError

    heads = _pairs("--fused-linear", args.fused_linear, UsageError)
    ((batch, length),) = _pairs("--fused-tokens", args.fused_tokens, UsageError)[:1]
    chunk = None if args.fused_chunk is None else _positive_int("--fused-chunk", args.fused_chunk, UsageError)
    extra_paths = [] if args.fused_import_path is None else _items(args.fused_import_path)
    for directory in extra_paths:
        if not os.path.isdir(directory):
            raise UsageError(f"--fused-import-path: {directory!r} is not a directory")
    repeats = _positive_int("--repeats", args.repeats, UsageError)
    if args.device not in ("cpu", "cuda") or (args.device == "cuda" and not torch.cuda.is_available()):
        raise UsageError(f"--device: expected cpu, or cuda with a GPU, got {args.device!r}")
    if args.threads is not None:
        torch.set_num_threads(_positive_int("--threads", args.threads, UsageError))
    if args.json is not None:
        _check_writable(args.json, UsageError)
    sys.path.extend(directory for directory in extra_paths if directory not in sys.path)
    device = torch.device(args.device)
    command = (
        f"gmpo-plugins bench --fused-linear {','.join(f'{v}x{h}' for v, h in heads)} --fused-tokens {batch}x{length}"
        + ("" if chunk is None else f" --fused-chunk {chunk}")
        + ("" if not extra_paths else f" --fused-import-path {','.join(extra_paths)}")
        + f" --device {args.device} --repeats {repeats}"
        + (f" --threads {torch.get_num_threads()}" if args.threads is not None else "")
    )
    result: dict[str, Any] = {"command": command, "machine": _machine(device)}
    result.update(
        run_fused_linear(
            heads, batch, length, chunk, device, repeats,
            progress=lambda message: print(f"bench: {message}", file=sys.stderr, flush=True),
        )
    )  # fmt: skip
    machine = result["machine"]
    print(f"`{command}`\n")
    print(
        f"Machine: {machine['processor']}, {machine['cpu_count']} CPUs, torch {machine['torch']} "
        f"({machine['torch_threads']} threads), {machine.get('device_name', machine['device'])}"
        + "".join(f", {name} {version}" for name, version in result["versions"].items())
        + "\n"
    )
    print(to_markdown(result), end="")
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.fused_linear is not None:
        return run_fused_linear_section(args)
    config = parse_config(args)
    from gmpo_plugins.bench import run_bench
    from gmpo_plugins.bench.report import print_rich, to_markdown

    result: dict[str, Any] = {"command": command_line(config, args)}
    result.update(run_bench(config, progress=lambda message: print(f"bench: {message}", file=sys.stderr, flush=True)))
    if args.markdown:
        print(to_markdown(result, targets_only=args.targets), end="")
    else:
        print_rich(result, targets_only=args.targets)
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    for name, why in result["failed"].items():
        print(f"gmpo-plugins bench: loss {name} failed: {why}", file=sys.stderr)
    return 1 if result["failed"] else 0
