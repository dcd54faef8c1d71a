"""Render a bench result (``runner.run_bench``) as rich tables or Markdown.

The Markdown starts with the command and the machine, so that it can be pasted into the
docs as it is; ``targets_only`` renders just those two lines and the targets table.
"""

from __future__ import annotations

from gmpo_plugins.bench.targets import token_label

COLUMNS = (
    "loss",
    "variant",
    "dtype",
    "B x T",
    "tokens",
    "median ms",
    "ns/token",
    "x floor",
    "x eager",
    "cpu ms",
    "x floor (cpu)",
    "x eager (cpu)",
    "extra MiB",
    "extra B/token",
    "compute ops",
    "compute ops expanded",
    "aten ops",
)
TARGET_COLUMNS = ("target", "measured", "status")


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def measurement_rows(result: dict) -> list[list[str]]:
    out = []
    for row in result["rows"]:
        extra = row["extra_bytes"]
        out.append(
            [
                row["loss"],
                row["variant"],
                row["dtype"],
                f"{row['batch']}x{row['length']}",
                token_label(row["tokens"]),
                _fmt(row["median_ms"], 3),
                _fmt(row["ns_per_token"]),
                _fmt(row["x_floor"], 1),
                _fmt(row["x_eager"]),
                _fmt(row.get("cpu_ms"), 3),
                _fmt(row.get("x_floor_cpu"), 1),
                _fmt(row.get("x_eager_cpu")),
                "-" if extra is None else f"{extra / 2**20:.2f}",
                _fmt(row["extra_bytes_per_token"]),
                str(row.get("compute_ops", "-")),
                str(row.get("expanded_compute_ops", "-")),
                str(row.get("aten_ops", "-")),
            ]
        )
    return out


def scaling_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    shapes = [f"{b}x{t}" for b, t in result["config"]["shapes"]]
    header = ["loss", "variant", "dtype", *[f"ns/token {s}" for s in shapes], "max/min"]
    rows = [
        [
            s["loss"],
            s["variant"],
            s["dtype"],
            *[_fmt(s["ns_per_token"].get(k)) for k in shapes],
            _fmt(s["max_over_min"]),
        ]
        for s in result["scaling"]
    ]
    return header, rows


def target_rows(result: dict) -> list[list[str]]:
    return [[t["target"], t["measured"], "met" if t["met"] else "NOT met"] for t in result["targets"]]


def machine_line(result: dict) -> str:
    m = result["machine"]
    device = m.get("device_name", m["device"])
    return (
        f"{m['platform']}, {m['cpu_count']} CPUs, torch {m['torch']} ({m['torch_threads']} intra-op threads), "
        f"device {device}, repeats {result['config']['repeats']}"
    )


def _summary(result: dict) -> str:
    met = sum(t["met"] for t in result["targets"])
    return f"{met} of {len(result['targets'])} targets met"


def _markdown_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(result: dict, targets_only: bool = False) -> str:
    """The command, the machine, the tables and the notes as GitHub Markdown (with
    ``targets_only``: the command, the machine and the targets table)."""
    parts = []
    if result.get("command"):
        parts += [f"Command: `{result['command']}`", ""]
    parts += [f"Machine: {machine_line(result)}"]
    if not targets_only:
        parts += [
            "",
            _markdown_table(COLUMNS, measurement_rows(result)),
            "",
            "Time per token across shapes:",
            "",
            _markdown_table(*scaling_rows(result)),
        ]
    if result["targets"]:
        parts += ["", f"Targets ({_summary(result)}):", "", _markdown_table(TARGET_COLUMNS, target_rows(result))]
    if not targets_only:
        parts += ["", *[f"- {note}" for note in result["notes"]]]
    return "\n".join(parts) + "\n"


def print_rich(result: dict, targets_only: bool = False) -> None:
    """Rich tables on stdout (plain Markdown when rich is not installed)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(to_markdown(result, targets_only), end="")
        return

    def table(title, header, rows):
        t = Table(title=title)
        for i, column in enumerate(header):
            t.add_column(column, justify="left" if i < 3 else "right")
        for row in rows:
            t.add_row(*row)
        return t

    console = Console(width=max(160, Console().width))
    if result.get("command"):
        console.print(f"command: {result['command']}", highlight=False)
    if not targets_only:
        console.print(
            table(f"gmpo-plugins bench: forward+backward ({machine_line(result)})", COLUMNS, measurement_rows(result))
        )
        console.print(table("time per token across shapes", *scaling_rows(result)))
    else:
        console.print(f"machine: {machine_line(result)}", highlight=False)
    if result["targets"]:
        console.print(table(f"targets ({_summary(result)})", TARGET_COLUMNS, target_rows(result)))
    if not targets_only:
        for note in result["notes"]:
            console.print(f"- {note}", highlight=False)
