"""``gmpo-plugins doctor``: is this environment ready to train with the registry losses?

Reports the versions (python, torch, CUDA, triton, each framework, with the range its adapter
is tested with and whether the installed one is inside it), the row of the compatibility
table that applies to each installed framework (``adapters.compatibility``), whether each installed
framework sees the losses through its own mechanism (``adapters.visibility``), which
backend ``impl="auto"`` uses per device and dtype, and a numeric self-check of every loss
and impl against its eager oracle (``bench.selfcheck``). Exit status 0 when every check
passed, 1 otherwise; ``--json`` prints the same as one JSON object.

``--framework F SETTING...`` instead prints where each hyper-parameter of the loss those
settings select comes from (``doctor_hparams``): the line and the warning a run logs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from gmpo_plugins import __version__
from gmpo_plugins.adapters.compatibility import columns, row_for
from gmpo_plugins.adapters.visibility import framework_checks
from gmpo_plugins.bench.selfcheck import environment, impl_choices, numeric_checks
from gmpo_plugins.cli.doctor_hparams import FRAMEWORKS, as_dict, resolve_settings
from gmpo_plugins.cli.errors import UsageError


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "doctor", help="check this environment: frameworks, backends, and every loss against its oracle"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--framework",
        choices=sorted(FRAMEWORKS),
        help="instead: show where each loss hyper-parameter comes from for the framework SETTINGs",
    )
    parser.add_argument(
        "settings",
        nargs="*",
        metavar="SETTING",
        help="with --framework: the framework's own settings (verl/skyrl key=value overrides, TRL GRPOConfig "
        "field=value and loss=NAME, OpenRLHF flags after --)",
    )
    parser.set_defaults(run=run)


def report() -> dict[str, Any]:
    """Every check of the module docstring; ``ok`` is False when any failed."""
    frameworks = [asdict(check) for check in framework_checks()]
    for check in frameworks:
        row = None if check["version"] is None else row_for(check["distribution"], check["version"])
        check["compatibility"] = None if row is None else columns(row)
    numeric = [asdict(check) for check in numeric_checks()]
    ok = all(check["ok"] is not False for check in frameworks) and all(check["ok"] for check in numeric)
    return {
        "ok": ok,
        "gmpo_plugins": __version__,
        "environment": environment(),
        "frameworks": frameworks,
        "impl_auto": impl_choices(),
        "numeric": numeric,
    }


def _mark(ok: bool | None) -> str:
    return {True: "ok  ", False: "FAIL", None: "--  "}[ok]


def _version(check: dict[str, Any]) -> str:
    """``0.9.1 (tested verl>=0.8.0,<0.10: in range)``, or ``-`` when not installed."""
    if check["version"] is None:
        return "-"
    if check["in_tested_range"] is None:
        return check["version"]
    where = "in range" if check["in_tested_range"] else "OUTSIDE the tested range"
    return f"{check['version']} (tested {check['tested_range']}: {where})"


def _print_text(result: dict[str, Any]) -> None:
    print(f"gmpo-plugins {result['gmpo_plugins']}")
    for key, value in result["environment"].items():
        print(f"  {key:<17} {value if value is not None else '-'}")
    print("frameworks (each through its own mechanism):")
    for check in result["frameworks"]:
        print(f"  [{_mark(check['ok'])}] {check['framework']:<9} {_version(check):<44} {check['detail']}")
    installed = [check for check in result["frameworks"] if check["version"] is not None]
    if installed:
        print("compatibility table (docs/install.md), the row that applies:")
    for check in installed:
        cells = check["compatibility"] or {"release": "none of the tested releases applies"}
        print(
            f"  {check['framework']:<9} "
            + "; ".join(f"{title}: {text}" for title, text in cells.items() if title != "framework")
        )
    print('impl="auto" uses:')
    for device, row in result["impl_auto"].items():
        print(f"  {device:<5} " + ", ".join(f"{dtype}: {backend}" for dtype, backend in row.items()))
    numeric = result["numeric"]
    failed = [check for check in numeric if not check["ok"]]
    print(f"numeric self-check against the eager oracle: {len(numeric) - len(failed)} of {len(numeric)} passed")
    for check in numeric:
        if not check["ok"]:
            print(f"  [FAIL] {check['loss']} impl={check['impl']} on {check['device']}: {check['detail']}")
    print("all checks passed" if result["ok"] else "some checks FAILED")


def run_framework(args: argparse.Namespace) -> int:
    """``--framework``: the provenance line and the default warning of the selected loss."""
    selector, resolution = resolve_settings(args.framework, args.settings)
    if args.json:
        print(json.dumps(as_dict(args.framework, selector, resolution), indent=2))
    elif resolution is None:
        print(f"{args.framework} {selector}: the framework's own loss (no gmpo-plugins hyper-parameters)")
    else:
        print(resolution.line())
        warning = resolution.default_warning()
        if warning is not None:
            print(f"warning: {warning}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.framework is not None:
        return run_framework(args)
    if args.settings:
        raise UsageError(f"settings {args.settings} need --framework")
    result = report()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_text(result)
    return 0 if result["ok"] else 1
