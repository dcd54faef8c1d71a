"""``gmpo-plugins frameworks``: one run spec, translated to each framework's own launch.

    gmpo-plugins frameworks SPEC --dry-run [--frameworks verl,openrlhf,trl,skyrl] [--out DIR]

Reads and checks the TOML run spec (``gmpo_plugins.frameworks.spec``), translates it for each
framework and prints, one block per framework, the exact command, the files it reads and
the differences the spec cannot remove. With ``--out DIR`` (a folder that must not exist)
it also writes ``DIR/<framework>/`` with those files and a ``launch.sh``; without it the
blocks name ``gmpo-frameworks/<framework>``. No framework needs to be installed. A bad spec,
or a setting a framework cannot express, is one line and exit status 2.

This version translates and writes launches; it does not start the trainers, so
``--dry-run`` is required.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gmpo_plugins.cli.compare_cmd import split_names
from gmpo_plugins.cli.errors import UsageError

DEFAULT_OUT = "gmpo-frameworks"


def add_parser(commands: argparse._SubParsersAction) -> None:
    from gmpo_plugins.frameworks.translate import FRAMEWORKS

    parser = commands.add_parser(
        "frameworks",
        help="translate one run spec into each framework's own launch (verl, OpenRLHF, TRL, SkyRL)",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    parser.add_argument("spec", metavar="SPEC", help="the TOML run spec")
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help=f"comma-separated, from {', '.join(FRAMEWORKS)} (default: all)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print each framework's launch (required)")
    parser.add_argument("--out", default=None, help="also write the launches here (a new folder)")
    parser.set_defaults(run=run)


def parse_frameworks(value: str) -> tuple[str, ...]:
    from gmpo_plugins.frameworks.translate import FRAMEWORKS

    names = split_names(value, "--frameworks")
    unknown = [name for name in names if name not in FRAMEWORKS]
    if unknown:
        raise UsageError(f"--frameworks: unknown {', '.join(unknown)}; valid: {', '.join(FRAMEWORKS)}")
    return tuple(names)


def run(args: argparse.Namespace) -> int:
    from gmpo_plugins.frameworks.launch import UnsupportedSettingError
    from gmpo_plugins.frameworks.render import render, write_launch
    from gmpo_plugins.frameworks.spec import SpecError, load_spec
    from gmpo_plugins.frameworks.translate import TRANSLATORS

    frameworks = parse_frameworks(args.frameworks)
    if not args.dry_run:
        raise UsageError("--dry-run is required: this version writes each framework's launch, it starts no trainer")
    out = Path(args.out) if args.out is not None else None
    if out is not None and out.exists():
        raise UsageError(f"--out: {out} already exists; choose a new folder (nothing is overwritten)")
    try:
        spec = load_spec(args.spec)
        launches = [TRANSLATORS[name](spec) for name in frameworks]
    except SpecError as exc:
        raise UsageError(f"{args.spec}: {exc}") from None
    except UnsupportedSettingError as exc:
        raise UsageError(f"{exc} (leave {exc.framework} out with --frameworks)") from None
    base = (out if out is not None else Path(DEFAULT_OUT)).resolve()
    launches = [launch.with_out(str(base / launch.framework)) for launch in launches]
    print(render(launches), end="")
    if out is not None:
        for launch in launches:
            write_launch(launch, out / launch.framework)
        print(f"launches written to {out}/")
    return 0
