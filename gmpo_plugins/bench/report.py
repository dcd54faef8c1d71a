"""Render a bench result (``runner.run_bench``) as rich tables or Markdown."""

from __future__ import annotations

from typing import Optional

COLUMNS = ("loss", "variant", "dtype", "B x T", "tokens", "median ms", "ns/token", "x floor", "x eager",
           "cpu ms", "x floor (cpu)", "x eager (cpu)", "extra MiB", "extra B/token")


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _tokens(n: int) -> str:
    return f"{n / 2**20:g}M" if n >= 2**20 else f"{n / 2**10:g}K" if n >= 2**10 else str(n)


def measurement_rows(result: dict) -> list[list[str]]:
    out = []
    for row in result["rows"]:
        extra = row["extra_bytes"]
        out.append([
            row["loss"], row["variant"], row["dtype"], f"{row['batch']}x{row['length']}", _tokens(row["tokens"]),
            _fmt(row["median_ms"], 3), _fmt(row["ns_per_token"]), _fmt(row["x_floor"], 1), _fmt(row["x_eager"]),
            _fmt(row.get("cpu_ms"), 3), _fmt(row.get("x_floor_cpu"), 1), _fmt(row.get("x_eager_cpu")),
            "-" if extra is None else f"{extra / 2**20:.2f}", _fmt(row["extra_bytes_per_token"]),
        ])
    return out


def scaling_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    shapes = [f"{b}x{t}" for b, t in result["config"]["shapes"]]
    header = ["loss", "variant", "dtype", *[f"ns/token {s}" for s in shapes], "max/min"]
    rows = [[s["loss"], s["variant"], s["dtype"], *[_fmt(s["ns_per_token"].get(k)) for k in shapes],
             _fmt(s["max_over_min"])] for s in result["scaling"]]
    return header, rows


def target_rows(result: dict) -> list[list[str]]:
    return [[t["target"], t["measured"], "met" if t["met"] else "NOT met"] for t in result["targets"]]


def machine_line(result: dict) -> str:
    m = result["machine"]
    device = m.get("device_name", m["device"])
    load = m.get("load_average_1m")
    load = "" if load is None else f", load average {load:.1f} at start"
    return (f"{m['platform']}, {m['cpu_count']} CPUs, torch {m['torch']} ({m['torch_threads']} threads), "
            f"device {device}, repeats {result['config']['repeats']}{load}")


def to_markdown(result: dict) -> str:
    """The three tables and the notes as GitHub Markdown."""
    def table(header, rows):
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)

    parts = [f"Machine: {machine_line(result)}", "", table(COLUMNS, measurement_rows(result)), "",
             "Time per token across shapes:", "", table(*scaling_rows(result))]
    if result["targets"]:
        parts += ["", "Targets:", "", table(["target", "measured", "status"], target_rows(result))]
    parts += ["", *[f"- {note}" for note in result["notes"]]]
    return "\n".join(parts) + "\n"


def print_rich(result: dict) -> None:
    """Rich tables on stdout (plain Markdown when rich is not installed)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(to_markdown(result))
        return

    def table(title, header, rows):
        t = Table(title=title)
        for i, column in enumerate(header):
            t.add_column(column, justify="left" if i < 3 else "right")
        for row in rows:
            t.add_row(*row)
        return t

    console = Console(width=max(160, Console().width))
    console.print(table(f"gmpo-plugins bench: forward+backward ({machine_line(result)})", COLUMNS,
                        measurement_rows(result)))
    console.print(table("time per token across shapes", *scaling_rows(result)))
    if result["targets"]:
        console.print(table("performance targets", ["target", "measured", "status"], target_rows(result)))
    for note in result["notes"]:
        console.print(f"- {note}", highlight=False)
