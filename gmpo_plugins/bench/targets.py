"""The performance targets, judged on the rows of one bench run.

Each target is a dict: ``target`` (what is asked, in words), ``measured`` (the value, with
the process-CPU-time figure beside the wall-clock one on CPU), ``met``, and for machines
``kind``, ``loss``, ``dtype``, ``value`` (the figure judged), ``limit``, ``basis``.

Time ratios are judged on process CPU time when the run is on CPU with one intra-op thread
(there it is the time the call computed, which other processes on a shared machine do not
inflate as they do the wall clock), else on the wall-clock medians; ``basis`` says which.

    floor      every built-in loss with a fused path, at the largest shape, per dtype:
               fused time / floor time <= 10 on CPU; gmpo <= 2 on CUDA
    speedup    gmpo at the largest shape, per dtype, CPU: eager / fused >= 10
    stricter   gmpo fp32 at the largest shape: fused / floor with a preallocated output
    memory     gmpo fp32 at the largest shape: peak extra bytes <= 1 byte/token + 1 KiB/sequence
    ops        gmpo fp32: at most 12 ops that compute (``ops.count_ops``) per forward+backward,
               at every shape of the run
    launches   CUDA gmpo fp32: at most 4 kernel launches per forward+backward
    scaling    every built-in loss with a fused path, per dtype: time per token at the
               smallest shape <= 2x that at the largest (64K and 4M tokens by default),
               i.e. the fixed cost of a call is small next to a small call's work
"""

from __future__ import annotations

CPU_FLOOR = 10.0
CUDA_FLOOR = 2.0
CPU_SPEEDUP = 10.0
MAX_OPS = 12
MAX_LAUNCHES = 4
MAX_SMALL_OVER_LARGE = 2.0
ROW_ALLOWANCE = 1024  # bytes per sequence counted as "O(B)" in the memory target


def token_label(n: int) -> str:
    """64K, 4M, 300: token counts as the docs write them."""
    return f"{n / 2**20:g}M" if n >= 2**20 else f"{n / 2**10:g}K" if n >= 2**10 else str(n)


def _ratio(value: float | None, reference: float | None) -> float | None:
    return None if value is None or reference is None or reference <= 0 else value / reference


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def _measured(wall: float | None, cpu: float | None, basis: str) -> str:
    """The judged figure first, the other one in parentheses."""
    if cpu is None:
        return _x(wall)
    if basis == "cpu time":
        return f"{_x(cpu)} CPU time ({_x(wall)} wall clock)"
    return f"{_x(wall)} (CPU time: {_x(cpu)})"


def _at_most(value: float | None, limit: float) -> bool:
    return value is not None and value <= limit


def _at_least(value: float | None, limit: float) -> bool:
    return value is not None and value >= limit


def _target(
    kind: str,
    loss: str,
    dtype: str | None,
    text: str,
    measured: str,
    value: float | None,
    limit: float,
    met: bool,
    basis: str | None = None,
) -> dict:
    return {
        "target": text,
        "measured": measured,
        "met": bool(met),
        "kind": kind,
        "loss": loss,
        "dtype": dtype,
        "value": value,
        "limit": limit,
        "basis": basis,
    }


def _shape(row: dict) -> str:
    return f"{row['batch']}x{row['length']}"


def time_basis(device: str, threads: int) -> str:
    """What time ratios are judged on: "cpu time" on CPU with one thread, else "wall clock"."""
    return "cpu time" if device == "cpu" and threads == 1 else "wall clock"


def evaluate(rows: list[dict], device: str, fused_losses: list[str], threads: int) -> list[dict]:
    """Every target that the rows of one run can judge, in the order of the module docstring.

    ``fused_losses``: the built-in losses measured that have a fused path (the targets are
    about those; a plugin's loss is timed but not judged). ``threads``: torch's intra-op
    threads during the run (``time_basis``).
    """
    basis = time_basis(device, threads)

    def judged(wall: float | None, cpu: float | None) -> float | None:
        return cpu if basis == "cpu time" and cpu is not None else wall

    fused = {(r["loss"], r["dtype"], r["tokens"]): r for r in rows if r["variant"] == "fused"}
    eager = {(r["loss"], r["dtype"], r["tokens"]): r for r in rows if r["variant"] == "eager"}
    floors = {(r["variant"], r["dtype"], r["tokens"]): r for r in rows if r["loss"] == "(floor)"}
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    sizes = sorted({r["tokens"] for r in rows})
    if not sizes:
        return []
    small, large = sizes[0], sizes[-1]
    dev = device.upper()
    out = []
    for dtype in dtypes:
        floor = floors.get(("floor", dtype, large))
        for loss in fused_losses:
            row = fused.get((loss, dtype, large))
            if row is None or floor is None or (device != "cpu" and loss != "gmpo"):
                continue
            limit = CPU_FLOOR if device == "cpu" else CUDA_FLOOR
            value = judged(row["x_floor"], row.get("x_floor_cpu"))
            out.append(
                _target(
                    "floor",
                    loss,
                    dtype,
                    f"{dev} {loss} {dtype} {_shape(row)}: fused within {limit:g}x of the floor",
                    _measured(row["x_floor"], row.get("x_floor_cpu"), basis),
                    value,
                    limit,
                    _at_most(value, limit),
                    basis,
                )
            )
    for dtype in dtypes:
        row, oracle = fused.get(("gmpo", dtype, large)), eager.get(("gmpo", dtype, large))
        if device == "cpu" and row and oracle:
            wall, cpu = _ratio(oracle["median_ms"], row["median_ms"]), _ratio(oracle.get("cpu_ms"), row.get("cpu_ms"))
            value = judged(wall, cpu)
            out.append(
                _target(
                    "speedup",
                    "gmpo",
                    dtype,
                    f"CPU gmpo {dtype} {_shape(row)}: fused >= {CPU_SPEEDUP:g}x faster than eager",
                    _measured(wall, cpu, basis),
                    value,
                    CPU_SPEEDUP,
                    _at_least(value, CPU_SPEEDUP),
                    basis,
                )
            )
    row = fused.get(("gmpo", "fp32", large))
    strict = floors.get(("floor, preallocated out", "fp32", large))
    if row and strict and strict["median_ms"] > 0:
        limit = CPU_FLOOR if device == "cpu" else CUDA_FLOOR
        wall, cpu = _ratio(row["median_ms"], strict["median_ms"]), _ratio(row.get("cpu_ms"), strict.get("cpu_ms"))
        value = judged(wall, cpu)
        out.append(
            _target(
                "stricter",
                "gmpo",
                "fp32",
                f"(stricter) {dev} gmpo fp32 {_shape(row)}: fused within "
                f"{limit:g}x of the floor with a preallocated output",
                _measured(wall, cpu, basis),
                value,
                limit,
                _at_most(value, limit),
                basis,
            )
        )
    if row and row["extra_bytes"] is not None:
        extra, allowed = row["extra_bytes"], row["tokens"] + ROW_ALLOWANCE * row["batch"]
        out.append(
            _target(
                "memory",
                "gmpo",
                "fp32",
                f"gmpo fp32 {_shape(row)}: peak extra memory <= 1 byte/token + {ROW_ALLOWANCE} bytes/sequence",
                f"{extra / row['tokens']:.3f} bytes/token ({extra / 2**20:.2f} MiB)",
                extra / row["tokens"],
                1.0,
                extra <= allowed,
            )
        )
    counted = [r for r in rows if r["variant"] == "fused" and r["loss"] == "gmpo" and r.get("compute_ops") is not None]
    counted = [r for r in counted if r["dtype"] == "fp32"] or counted
    if counted:
        worst = max(counted, key=lambda r: r["compute_ops"])
        least = min(counted, key=lambda r: r["compute_ops"])
        measured = f"{worst['compute_ops']} at {_shape(worst)} ({worst['aten_ops']} with views and allocations)"
        if least is not worst:
            measured += f"; {least['compute_ops']} at {_shape(least)}"
        out.append(
            _target(
                "ops",
                "gmpo",
                worst["dtype"],
                f"gmpo {worst['dtype']}: at most {MAX_OPS} aten ops that compute per forward+backward, at every shape",
                measured,
                worst["compute_ops"],
                MAX_OPS,
                worst["compute_ops"] <= MAX_OPS,
            )
        )
    if row and row.get("launches") is not None:
        launches = row["launches"]
        out.append(
            _target(
                "launches",
                "gmpo",
                "fp32",
                f"CUDA gmpo fp32 {_shape(row)}: at most {MAX_LAUNCHES} kernel launches per forward+backward",
                str(launches),
                launches,
                MAX_LAUNCHES,
                launches <= MAX_LAUNCHES,
            )
        )
    if small != large:
        for dtype in dtypes:
            for loss in fused_losses:
                a, b = fused.get((loss, dtype, small)), fused.get((loss, dtype, large))
                if a is None or b is None:
                    continue
                wall = _ratio(a["ns_per_token"], b["ns_per_token"])
                cpu = _ratio(_ratio(a.get("cpu_ms"), a["tokens"]), _ratio(b.get("cpu_ms"), b["tokens"]))
                value = judged(wall, cpu)
                out.append(
                    _target(
                        "scaling",
                        loss,
                        dtype,
                        f"{dev} {loss} {dtype}: time per token at "
                        f"{token_label(small)} tokens within {MAX_SMALL_OVER_LARGE:g}x of that at "
                        f"{token_label(large)}",
                        _measured(wall, cpu, basis),
                        value,
                        MAX_SMALL_OVER_LARGE,
                        _at_most(value, MAX_SMALL_OVER_LARGE),
                        basis,
                    )
                )
    return out
