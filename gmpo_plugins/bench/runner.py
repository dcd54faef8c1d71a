"""Run the bench grid: every (shape, dtype) x loss x variant, plus scaling and targets.

Result (JSON-serialisable dict):

    machine   platform, torch version, threads, device name
    config    the BenchConfig
    rows      one per measurement: loss, variant, batch, length, tokens, dtype, median_ms,
              cpu_ms (CPU only), ns_per_token, x_floor, x_eager (wall clock), x_floor_cpu,
              x_eager_cpu (process CPU time), extra_bytes, extra_bytes_per_token, aten_ops,
              compute_ops, expanded_compute_ops, ops_by_name (``ops.count_ops``), launches (CUDA gmpo fused only)
    scaling   per (loss, variant, dtype): ns/token at each shape and max/min across them
    targets   ``targets.evaluate``: every target the run can judge, met or not
    notes     what was skipped and how time, memory and ops were measured
    failed    {loss: error} for losses whose call raised (a broken plugin): measured no
              further, the other losses are
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from gmpo_plugins.bench import measure, ops, targets, variants
from gmpo_plugins.core.registry import get_loss

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}
DEFAULT_SHAPES = ((64, 1024), (256, 4096), (512, 8192))


@dataclass
class BenchConfig:
    losses: list[str]
    shapes: list[tuple[int, int]] = field(default_factory=lambda: list(DEFAULT_SHAPES))
    dtypes: list[str] = field(default_factory=lambda: ["fp32", "bf16"])
    device: str = "cpu"
    repeats: int = 5


def _machine(device: torch.device) -> dict:
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": device.type,
        # other processes compete for the CPUs of a shared machine: the load when the run started
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    return info


def _row(
    loss: str, variant: str, shape, dtype: str, timing: measure.Timing, extra: int | None, counted: ops.OpCount
) -> dict:
    tokens = shape[0] * shape[1]
    return {
        "loss": loss,
        "variant": variant,
        "batch": shape[0],
        "length": shape[1],
        "tokens": tokens,
        "dtype": dtype,
        "median_ms": timing.wall * 1e3,
        "cpu_ms": None if timing.cpu is None else timing.cpu * 1e3,
        "ns_per_token": timing.wall * 1e9 / tokens,
        "extra_bytes": extra,
        "extra_bytes_per_token": None if extra is None else extra / tokens,
        "aten_ops": counted.aten_ops,
        "compute_ops": counted.compute_ops,
        "expanded_compute_ops": counted.expanded_compute_ops,
        "ops_by_name": counted.by_name,
    }


def _ratios(row: dict, floor_row: dict, eager_row: dict | None) -> None:
    """x_floor / x_eager from wall-clock medians, x_floor_cpu / x_eager_cpu from CPU time."""

    def ratio(value, reference):
        return None if value is None or reference is None or reference <= 0 else value / reference

    for suffix, key in (("", "median_ms"), ("_cpu", "cpu_ms")):
        row["x_floor" + suffix] = ratio(row[key], floor_row[key])
        row["x_eager" + suffix] = None if eager_row is None else ratio(row[key], eager_row[key])


def _scaling(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["loss"], row["variant"], row["dtype"]), []).append(row)
    out = []
    for (loss, variant, dtype), items in groups.items():
        per_token = {f"{r['batch']}x{r['length']}": r["ns_per_token"] for r in items}
        values = list(per_token.values())
        out.append(
            {
                "loss": loss,
                "variant": variant,
                "dtype": dtype,
                "ns_per_token": per_token,
                "max_over_min": max(values) / min(values),
            }
        )
    return out


def _cuda_launches(fn: Callable[[], None]) -> int | None:
    """Kernels launched by one call on CUDA (torch.profiler), None if unavailable."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:  # noqa: BLE001 - the count is informative only
        return None


@dataclass(frozen=True)
class _Variant:
    """One callable of a grid cell: ``fn()`` is one forward+backward that must keep
    ``expected`` bytes (its gradient)."""

    loss: str
    name: str
    fn: Callable[[], None]
    expected: int


@dataclass(frozen=True)
class _Cell:
    """One (shape, dtype) of the grid: measures its variants into result rows."""

    shape: tuple[int, int]
    dtype_name: str
    device: torch.device
    repeats: int
    clear_grad: Callable[[], None]
    progress: Callable[[str], None]

    def measure(self, cell_variants: list[_Variant]) -> list[dict]:
        """Time (interleaved, ``measure.interleaved_median_times``), peak extra memory and
        operator count of each variant: one row each (see the module docstring)."""
        label = f"{self.shape[0]}x{self.shape[1]} {self.dtype_name}"
        self.progress(f"{label}: timing {len(cell_variants)} variants in {self.repeats} interleaved rounds")
        timings = measure.interleaved_median_times([v.fn for v in cell_variants], self.device, self.repeats)
        rows = []
        for variant, timing in zip(cell_variants, timings, strict=True):
            self.progress(f"{label} {variant.loss} {variant.name}: memory and operators")
            extra = measure.peak_extra_bytes(variant.fn, self.device, variant.expected, reset=self.clear_grad)
            counted = ops.count_ops(variant.fn)
            row = _row(variant.loss, variant.name, self.shape, self.dtype_name, timing, extra, counted)
            if self.device.type == "cuda" and variant.loss == "gmpo" and variant.name == "fused":
                row["launches"] = _cuda_launches(variant.fn)
            rows.append(row)
        return rows


def run_bench(config: BenchConfig, progress: Callable[[str], None] = lambda message: None) -> dict:
    """Measure every (shape, dtype, loss, variant) of ``config``; see the module docstring."""
    device = torch.device(config.device)
    specs = [get_loss(name) for name in config.losses]
    notes = [
        "time: median of forward+backward over the repeats, the variants of one shape and dtype timed in "
        "interleaved rounds after one warm-up call each (wall clock; on CPU also process CPU time, which "
        "other processes on a shared machine inflate much less)",
        "floor: torch.where(mask, log_probs, old_log_probs) into a new tensor (one read of the "
        "inputs, one write of a gradient-sized tensor, including the first-touch page faults every "
        "fresh gradient pays); 'floor, preallocated out' writes into one reused buffer",
        "extra memory: peak bytes allocated during forward+backward minus the gradient; "
        + (
            "torch.cuda.max_memory_allocated"
            if device.type == "cuda"
            else "CPU: torch.profiler allocation events of torch's CPU allocator, summed in time order"
        ),
        "advantages are (B,) (a (B, T) row-constant tensor costs the fused path one more blocked pass)",
        "ops: aten operators dispatched by one forward+backward (TorchDispatchMode; a custom operator "
        "counts once); 'compute' leaves out views, allocations and dtype promotion, which launch nothing; "
        "'expanded' counts the torch code inside the custom operators (the blocked pass and per-row epilogue "
        "on CPU) op by op",
        f"targets: time ratios judged on {targets.time_basis(device.type, torch.get_num_threads())}"
        + (
            " (one intra-op thread on CPU: the time the call computed, which other processes inflate much less "
            "than the wall clock)"
            if targets.time_basis(device.type, torch.get_num_threads()) == "cpu time"
            else ""
        ),
    ]
    rows: list[dict] = []
    failed: dict[str, str] = {}
    verl_note = None
    for dtype_name in config.dtypes:
        dtype = DTYPES[dtype_name]
        for shape in config.shapes:
            requires = tuple(sorted({name for spec in specs for name in spec.requires}))
            case = variants.make_case(shape[0], shape[1], dtype, device, requires=requires)
            grad_bytes = case.log_probs.numel() * case.log_probs.element_size()
            label = f"{shape[0]}x{shape[1]} {dtype_name}"
            cell_variants = [
                _Variant("(floor)", "floor", variants.floor(case), grad_bytes),
                _Variant("(floor)", "floor, preallocated out", variants.floor_preallocated(case), 0),
            ]
            for spec in specs:
                if spec.name in failed:
                    continue
                spec_case = case.for_spec(spec)
                fused_fn = variants.fused(spec, spec_case)
                try:
                    fused_fn()
                except Exception as exc:  # noqa: BLE001 - a broken (plugin) loss must not stop the others
                    failed[spec.name] = f"{type(exc).__name__}: {exc}"
                    progress(f"{label} {spec.name} failed: {failed[spec.name]}")
                    continue
                if variants.has_eager(spec):
                    cell_variants.append(_Variant(spec.name, "fused", fused_fn, grad_bytes))
                    cell_variants.append(_Variant(spec.name, "eager", variants.eager(spec, spec_case), grad_bytes))
                else:
                    cell_variants.append(_Variant(spec.name, "registry (no fused path)", fused_fn, grad_bytes))
                if spec.name == "gmpo":
                    verl_fn, why = variants.verl_geo_mean(case)
                    if verl_fn is None:
                        verl_note = why
                    else:
                        cell_variants.append(_Variant("gmpo", "verl geo_mean", verl_fn, grad_bytes))
            cell = _Cell(shape, dtype_name, device, config.repeats, case.clear_grad, progress)
            group = cell.measure(cell_variants)
            floor_row = group[0]
            eager_rows = {row["loss"]: row for row in group if row["variant"] == "eager"}
            for row in group:
                _ratios(row, floor_row, eager_rows.get(row["loss"]))
            rows.extend(group)
            del case, cell_variants, cell  # free the inputs before building the next case
    if verl_note:
        notes.append(verl_note)
    notes.extend(f"loss {name} failed and was skipped: {why}" for name, why in failed.items())
    return {
        "failed": failed,
        "machine": _machine(device),
        "config": asdict(config),
        "rows": rows,
        "scaling": _scaling(rows),
        "targets": targets.evaluate(
            rows, device.type, [s.name for s in specs if variants.has_eager(s)], torch.get_num_threads()
        ),
        "notes": notes,
    }
