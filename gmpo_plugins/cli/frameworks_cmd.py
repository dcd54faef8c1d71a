"""``gmpo-plugins frameworks``: one run spec, translated to each framework's own launch.

    gmpo-plugins frameworks SPEC [--set KEY=VALUE ...] [--dry-run] [--frameworks verl,openrlhf,trl,skyrl]
                                 [--out DIR] [--timeout S]

``--frameworks`` defaults to all four for ``--dry-run`` and to verl, OpenRLHF and TRL for a run
(SkyRL runs when named: it cannot set AdamW's eps, which the large-eps example sets).

Reads and checks the TOML run spec (``gmpo_plugins.frameworks.spec``; ``--set`` replaces a value,
as written in TOML), translates it for each
framework and prints, one block per framework, the exact command, the files it reads and
the differences the spec cannot remove. With ``--out DIR`` (a folder that must not exist)
it also writes ``DIR/<framework>/`` with those files and a ``launch.sh``; without it the
blocks name ``gmpo-frameworks/<framework>``. No framework needs to be installed. A bad spec is
one line and exit status 2; a setting a framework cannot express takes that framework's block
(``refused: ...``), the other frameworks' launches are still printed (and written), and the
command ends with one line per refusal on stderr and exit status 2.

Without ``--dry-run`` it runs each framework's own trainer in that framework's virtualenv
(``gmpo_plugins.frameworks.runner``: verl, OpenRLHF, TRL and SkyRL, with the CPU stand-ins of
``examples/`` where the interpreter sees no GPU; a setting any framework cannot express is
refused before anything starts, and so is a ``GMPO_PLUGINS_LOSS_HPARAMS`` in this environment:
each launch sets that variable itself where its framework needs it, and a launch without it
would inherit this one), writes ``DIR/report.md`` (status, the first update
compared between frameworks, a per-step table per metric, the differences) and
``DIR/records.json``, and exits with status 1 when a run is incomplete (130 after Ctrl-C, the
report written with what finished).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from gmpo_plugins.cli.compare_cmd import split_names
from gmpo_plugins.cli.errors import UsageError

DEFAULT_OUT = "gmpo-frameworks"
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_RUN = ("verl", "openrlhf", "trl")  # SkyRL by name: it refuses the large-eps example (no AdamW eps)
INTERRUPTED_STATUS = 130


def add_parser(commands: argparse._SubParsersAction) -> None:
    from gmpo_plugins.frameworks.translate import FRAMEWORKS

    parser = commands.add_parser(
        "frameworks",
        help="translate one run spec into each framework's own launch (verl, OpenRLHF, TRL, SkyRL)",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    parser.add_argument("spec", metavar="SPEC", help="the TOML run spec")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help='replace a spec value (TOML: steps=1, dtype="float32", loss_hparams.eps_low=0.3); repeatable',
    )
    parser.add_argument(
        "--frameworks",
        default=None,
        help=f"comma-separated, from {', '.join(FRAMEWORKS)} (default: all for --dry-run, verl,openrlhf,trl for a run)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print each framework's launch, run nothing")
    parser.add_argument(
        "--out",
        default=None,
        help=f"write the launches (and a run's report) here, a new folder (default ./{DEFAULT_OUT} for a run)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds per trainer (default {DEFAULT_TIMEOUT_S:.0f})",
    )
    parser.set_defaults(run=run)


def parse_frameworks(value: str) -> tuple[str, ...]:
    from gmpo_plugins.frameworks.translate import FRAMEWORKS

    names = split_names(value, "--frameworks")
    unknown = [name for name in names if name not in FRAMEWORKS]
    if unknown:
        raise UsageError(f"--frameworks: unknown {', '.join(unknown)}; valid: {', '.join(FRAMEWORKS)}")
    return tuple(names)


def run(args: argparse.Namespace) -> int:
    from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
    from gmpo_plugins.frameworks.launch import UnsupportedSettingError
    from gmpo_plugins.frameworks.render import block, write_launch
    from gmpo_plugins.frameworks.spec import SpecError, load_spec, parse_override
    from gmpo_plugins.frameworks.translate import FRAMEWORKS, TRANSLATORS

    default = FRAMEWORKS if args.dry_run else DEFAULT_RUN
    frameworks = parse_frameworks(args.frameworks) if args.frameworks is not None else default
    if args.timeout <= 0:
        raise UsageError(f"--timeout: expected seconds > 0, got {args.timeout}")
    out = Path(args.out) if args.out is not None else (None if args.dry_run else Path(DEFAULT_OUT))
    if out is not None and out.exists():
        raise UsageError(f"--out: {out} already exists; choose a new folder (nothing is overwritten)")
    try:
        overrides = dict(parse_override(text) for text in args.set)
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    try:
        spec = load_spec(args.spec, overrides)
    except SpecError as exc:
        raise UsageError(f"{args.spec}: {exc}") from None
    launches, refusals = [], []
    for name in frameworks:
        try:
            launches.append(TRANSLATORS[name](spec))
        except UnsupportedSettingError as exc:
            refusals.append(exc)
    lines = [f"{refusal} (leave {refusal.framework} out with --frameworks)" for refusal in refusals]
    if refusals and not args.dry_run:
        raise UsageError(lines[0])
    if not args.dry_run and os.environ.get(OVERRIDE_ENV, "").strip():
        raise UsageError(
            f"{OVERRIDE_ENV} is set in this environment; the spec's loss_hparams decide a run's hyper-parameters "
            "(each launch sets the variable where its framework needs it, and the others would inherit this one): "
            "unset it"
        )
    base = (out if out is not None else Path(DEFAULT_OUT)).resolve()
    launches = [launch.with_out(str(base / launch.framework)) for launch in launches]
    if not args.dry_run:
        return run_trainers(args, spec, launches, base)
    blocks = {launch.framework: block(launch) for launch in launches}
    blocks.update({refusal.framework: f"== {refusal.framework} ==\nrefused: {refusal}" for refusal in refusals})
    print("\n\n".join(blocks[name] for name in frameworks))
    if out is not None:
        for launch in launches:
            write_launch(launch, out / launch.framework)
        print(f"launches written to {out}/")
    for line in lines:
        print(f"gmpo-plugins frameworks: error: {line}", file=sys.stderr)
    return 2 if refusals else 0


def run_trainers(args: argparse.Namespace, spec, launches: list, out: Path) -> int:
    """Run every launch's trainer (module docstring), then write the report."""
    from gmpo_plugins.frameworks.render import write_launch
    from gmpo_plugins.frameworks.report import write_report
    from gmpo_plugins.frameworks.runner import (
        RunnerError,
        framework_python,
        plan_local,
        run_launch,
    )

    steps = spec.optimiser_steps_per_rl_step
    try:  # every interpreter is found, and every launch placed, before any trainer starts
        pythons = {launch.framework: framework_python(launch.framework) for launch in launches}
        locals_ = [plan_local(launch, pythons[launch.framework], out / launch.framework, steps) for launch in launches]
    except RunnerError as exc:
        raise UsageError(str(exc)) from None
    runs = []
    status = 0
    try:
        for launch, local in zip(launches, locals_, strict=True):
            name = launch.framework
            write_launch(launch, out / name)  # as translated; output.log shows the command run here
            with_standins = f", stand-ins: {local.standins}" if local.standins else ""
            print(f"{name}: running ({pythons[name]}{with_standins})", flush=True)
            run = run_launch(spec, local, out / name, pythons[name], args.timeout)
            runs.append(run)
            state = "complete" if run.complete else "INCOMPLETE: " + run.failure.splitlines()[0]
            print(f"{name}: {state}, {run.seconds:.1f} s, {len(run.records)} RL steps", flush=True)
    except KeyboardInterrupt:
        status = INTERRUPTED_STATUS
        print("interrupted: the running trainer's processes were ended", file=sys.stderr)
    finally:
        for local in locals_:  # the Ray folders of runs that never started
            if local.ray_dir is not None:
                shutil.rmtree(local.ray_dir, ignore_errors=True)
    complete = write_report(out, args.spec, spec, runs, launches)
    print(f"report: {out / 'report.md'}" + ("" if complete else " (incomplete)"))
    return status or (0 if complete else 1)
