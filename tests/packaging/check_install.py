"""Check gmpo-plugins as installed from its wheel (run by ``nox -s dist`` with the Python of a
fresh virtualenv where the wheel, not the checkout, is installed).

    python tests/packaging/check_install.py core
        the package is imported from site-packages; every console script and
        ``gmpo_plugins`` entry point loads; ``gmpo-plugins list --json`` lists every
        built-in loss of the checkout (read from the checkout with plugin autoloading
        off); ``get_loss("gmpo")`` gives the hand-derived loss, gradient and clip metric.
    python tests/packaging/check_install.py verl
        a fresh ``import verl`` (nothing else) resolves ``loss_mode=gmpo`` to our loss,
        through the wheel's ``verl.plugins`` entry point.
    python tests/packaging/check_install.py extras WHEEL CONSTRAINTS
        ``pip install --dry-run WHEEL[...] -c CONSTRAINTS`` resolves every extra the wheel
        declares: verl, openrlhf and skyrl each alone, the others together (see
        ``SEPARATE_EXTRAS``, and ``SOURCE_BUILD_ENV`` for openrlhf's flash-attn).

This script imports gmpo_plugins from the virtualenv (its directory, tests/packaging, is
first on sys.path, not the checkout); the commands it starts run outside the checkout.
Exits 1 with a message when a check fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.metadata
import json
import math
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTION = "gmpo-plugins"
BIN = Path(sys.executable).parent


class CheckFailed(Exception):
    """A check of the installed distribution failed."""


def run(command: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None) -> str:
    """Run ``command`` outside the checkout; its stdout, or CheckFailed with its output."""
    with tempfile.TemporaryDirectory() as outside:
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd or outside)
    if result.returncode != 0:
        output = f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
        raise CheckFailed(f"{' '.join(command)} exited {result.returncode}:\n{output}")
    return result.stdout


def python(code: str, *, env: dict[str, str] | None = None, cwd: str | Path | None = None) -> str:
    """Run ``code`` with this virtualenv's Python (see ``run``)."""
    return run([sys.executable, "-c", code], env=env, cwd=cwd)


def check_imported_from_site_packages() -> None:
    import gmpo_plugins

    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    if not Path(gmpo_plugins.__file__).resolve().is_relative_to(site_packages):
        raise CheckFailed(f"gmpo_plugins imported from {gmpo_plugins.__file__}, not from {site_packages}")
    print(f"ok: gmpo_plugins imported from {gmpo_plugins.__file__}")


def check_entry_points() -> None:
    """Every console script and gmpo_plugins entry point of the distribution loads."""
    entry_points = [
        point
        for point in importlib.metadata.distribution(DISTRIBUTION).entry_points
        if point.group in ("console_scripts", "gmpo_plugins")
    ]
    for point in entry_points:
        point.load()
        if point.group == "console_scripts" and not (BIN / point.name).is_file():
            raise CheckFailed(f"console script {point.name} not installed in {BIN}")
    print(f"ok: entry points load: {', '.join(f'[{p.group}] {p.name}' for p in entry_points)}")


def check_listed_losses() -> None:
    """``gmpo-plugins list --json`` from the wheel names every built-in loss of the checkout."""
    listed = json.loads(run([str(BIN / "gmpo-plugins"), "list", "--json"]))
    installed = {row["name"] for row in listed if row["provider"] == DISTRIBUTION}
    checkout = json.loads(
        python(
            "import json, gmpo_plugins\n"
            "print(json.dumps([gmpo_plugins.__file__, [s.name for s in gmpo_plugins.list_losses()]]))",
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "GMPO_PLUGINS_DISABLE_AUTOLOAD": "1"},
        )
    )
    origin, builtins = checkout[0], set(checkout[1])
    if not Path(origin).resolve().is_relative_to(REPO):
        raise CheckFailed(f"the checkout's losses were read from {origin}, not from {REPO}")
    if not {"gmpo", "grpo"} <= builtins:
        raise CheckFailed(f"the checkout lists no gmpo/grpo: {sorted(builtins)}")
    if installed != builtins:
        raise CheckFailed(f"gmpo-plugins list --json gives {sorted(installed)}, the checkout has {sorted(builtins)}")
    print(f"ok: gmpo-plugins list --json: {', '.join(sorted(installed))}")


def check_loss_call() -> None:
    """gmpo on two sequences of two tokens, old log-probs 0, eps 0.4 (log space), N = 2.

    Row 0 (A = 1): log ratios (0, 1); 1 > eps_high is clipped to 0.4, so
    w_0 = exp((0 + 0.4) / 2) = e^0.2 and L_0 = -e^0.2; only token 0 has a gradient,
    dL/dr = -A w / |o| / N = -e^0.2 / 4. Row 1 (A = 0.5): ratios 1, w_1 = 1, L_1 = -0.5,
    gradient -0.5 / 2 / 2 = -0.125 per token. Loss (L_0 + L_1) / 2; 1 of 4 tokens clipped high.
    """
    import torch

    from gmpo_plugins import BatchInfo, LossInputs, get_loss

    log_probs = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        log_probs,
        torch.zeros(2, 2, dtype=torch.float64),
        torch.tensor([1.0, 0.5], dtype=torch.float64),
        torch.ones(2, 2, dtype=torch.bool),
    )
    out = get_loss("gmpo")(inputs, BatchInfo(dp_size=1, global_batch_size=2))
    out.loss.backward()
    e = math.exp(0.2)
    expected_grad = torch.tensor([[-e / 4, 0.0], [-0.125, -0.125]], dtype=torch.float64)
    ok = (
        math.isclose(out.loss.item(), (-e - 0.5) / 2, rel_tol=1e-12)
        and torch.allclose(log_probs.grad, expected_grad, rtol=1e-12, atol=1e-15)
        and out.metrics["clip_frac_high"].item() == 0.25
    )
    if not ok:
        raise CheckFailed(
            f"get_loss('gmpo') gave loss {out.loss.item()}, gradient {log_probs.grad.tolist()}, "
            f"clip_frac_high {out.metrics['clip_frac_high'].item()}; expected {(-e - 0.5) / 2}, "
            f"{expected_grad.tolist()}, 0.25"
        )
    print(f"ok: get_loss('gmpo') loss {out.loss.item():.12f}, gradient and clip_frac_high as derived by hand")


VERL_PROBE = """
import json
import verl
from verl.trainer.ppo.core_algos import get_policy_loss_fn
fn = get_policy_loss_fn("gmpo")
print(json.dumps({"loss": getattr(fn, "__gmpo_plugins_loss__", None), "module": fn.__module__,
                  "verl": verl.__version__}))
"""


def check_verl() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    result = json.loads(python(VERL_PROBE, env=environment).strip().splitlines()[-1])
    if result["loss"] != "gmpo" or not result["module"].startswith("gmpo_plugins."):
        raise CheckFailed(f"verl resolved loss_mode=gmpo to {result}, not to gmpo-plugins' gmpo")
    print(f"ok: import verl {result['verl']}: loss_mode=gmpo -> {result['module']} (the verl.plugins entry point)")


# packages named in the one-line summary of a dry run
FRAMEWORKS = {"verl", "openrlhf", "trl", "skyrl", "transformers", "ray", "deepspeed", "flash_attn"}
KEY_PACKAGES = FRAMEWORKS | {"rich", "matplotlib", "pytest", "nox"}
# extras that cannot share an environment (verl 0.9: transformers < 5.11; OpenRLHF 0.11.2:
# transformers == 5.15.0; SkyRL 0.3: transformers <= 5.8.0) are resolved one by one; every
# other extra in one resolution together, which shows that each of them resolves (a solution
# for the union is one for each)
SEPARATE_EXTRAS = ("verl", "openrlhf", "skyrl")
# flash-attn, a requirement of openrlhf, is published as source only and its setup.py
# imports torch: its metadata is prepared here without build isolation (against the
# virtualenv's torch, with what else its setup.py imports installed first) and without its
# CUDA build, as `nox -s openrlhf` installs it.
SOURCE_BUILD_ENV = {"FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE", "FLASH_ATTENTION_FORCE_BUILD": "TRUE"}
SOURCE_BUILD_REQUIREMENTS = ("setuptools", "wheel", "packaging", "psutil", "ninja")
NEEDS_TORCH_TO_BUILD = {"openrlhf"}


def dry_run(wheel: Path, extras: list[str], constraints: Path) -> str:
    """What ``pip install --dry-run WHEEL[extras]`` would install, torch held by ``constraints``."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-"]
    command += ["-c", str(constraints), f"{wheel.resolve()}[{','.join(extras)}]"]
    env = dict(os.environ)
    if NEEDS_TORCH_TO_BUILD & set(extras):
        command.append("--no-build-isolation")
        env.update(SOURCE_BUILD_ENV)
    report = json.loads(run(command, env=env))
    names = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]}
    return ", ".join(f"{name}=={names[name]}" for name in sorted(names) if name in KEY_PACKAGES) or "-"


def check_extras(wheel: Path, constraints: Path) -> None:
    """Dry-run every declared extra, in parallel resolutions (they mostly wait on the index)."""
    extras = importlib.metadata.distribution(DISTRIBUTION).metadata.get_all("Provides-Extra") or []
    if not extras:
        raise CheckFailed("the installed distribution declares no extras")
    groups = [[extra] for extra in extras if extra in SEPARATE_EXTRAS]
    groups.append([extra for extra in extras if extra not in SEPARATE_EXTRAS])
    if NEEDS_TORCH_TO_BUILD & set(extras):
        run([sys.executable, "-m", "pip", "install", "--quiet", *SOURCE_BUILD_REQUIREMENTS])
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(groups)) as pool:
        futures = [(group, pool.submit(dry_run, wheel, group, constraints)) for group in groups if group]
        for group, future in futures:
            try:
                print(f"ok: [{','.join(group)}] resolves: {future.result()}", flush=True)
            except CheckFailed as exc:
                failures.append(f"[{','.join(group)}] does not resolve: {exc}")
    if failures:
        raise CheckFailed("\n".join(failures))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="check", required=True)
    commands.add_parser("core")
    commands.add_parser("verl")
    extras = commands.add_parser("extras")
    extras.add_argument("wheel", type=Path)
    extras.add_argument("constraints", type=Path)
    args = parser.parse_args()
    try:
        if args.check == "core":
            check_imported_from_site_packages()
            check_entry_points()
            check_listed_losses()
            check_loss_call()
        elif args.check == "verl":
            check_verl()
        else:
            check_extras(args.wheel, args.constraints)
    except CheckFailed as exc:
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
