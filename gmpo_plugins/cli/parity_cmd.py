"""``gmpo-plugins parity``: hard fixed batches through every available loss call path,
compared with the core (``gmpo_plugins.compare.parity.harness``). Exit status 1 when an adapter
of this package differs from the core beyond the tolerance."""

from __future__ import annotations

import argparse

from gmpo_plugins.cli.errors import UsageError


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "parity",
        help="compare every installed adapter and reference loss path with the core",
        description="Hard fixed batches through every available loss call path, compared with the core. "
        "Exit status 1 when an adapter of this package, or a loss itself, differs from the core beyond the "
        "tolerance or fails.",
    )
    parser.add_argument("--losses", default=None, help="comma-separated registry losses (default: all)")
    parser.add_argument("--tol", type=float, default=None, help="tolerance, scaled by max(1, |core|) (default 1e-6)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        raise UsageError("parity prints its table with rich: pip install 'gmpo-plugins[cli]'") from None

    from gmpo_plugins.compare.parity import harness
    from gmpo_plugins.core.registry import UnknownLossError, get_loss

    losses = None
    if args.losses is not None:
        losses = [name.strip() for name in args.losses.split(",") if name.strip()]
        if not losses:
            raise UsageError(f"--losses: expected comma-separated loss names, got {args.losses!r}")
        try:
            for name in losses:
                get_loss(name)
        except UnknownLossError as exc:
            raise UsageError(f"--losses: {exc}") from None
    tol = harness.TOLERANCE if args.tol is None else args.tol
    if not tol > 0:
        raise UsageError(f"--tol: expected a number > 0, got {args.tol}")

    rows, skipped = harness.run_parity(losses, tol)
    table = Table(title=f"gmpo-plugins parity vs core (cases: {', '.join(c.name for c in harness.parity_cases())})")
    for column in ("target", "kind", "loss", "Δloss", "Δgrad", "Δmetric", "worst metric", "Δsplit 2/4", "status"):
        table.add_column(column, overflow="fold")
    for row in rows:
        status = "ok" if row.ok else ("FAIL" if row.kind == "adapter" else "differs")
        table.add_row(
            row.label,
            row.kind,
            row.loss_name,
            f"{row.d_loss:.2e}",
            f"{row.d_grad:.2e}",
            f"{row.d_metric:.2e}",
            row.metric_key or "-",
            f"{row.d_split:.2e}",
            status,
        )
    console = Console(width=None if Console().is_terminal else 160)
    console.print(table)
    console.print(
        "Δ: worst over the cases of |target - core| / max(1, |core|); "
        "Δsplit: 2 and 4 micro-batches accumulated vs the core's whole batch"
    )
    for label, reason in skipped:
        console.print(f"skipped {label}: {reason}")
    failed = [row for row in rows if row.kind == "adapter" and not row.ok]
    for row in rows:
        if not row.ok:
            head = "FAIL" if row.kind == "adapter" else "reference differs"
            console.print(f"{head} {row.label} / {row.loss_name}: {'; '.join(row.failures[:4])}")
    console.print(f"tolerance {tol:g}; {len(failed)} adapter row(s) failed")
    return 1 if failed else 0
