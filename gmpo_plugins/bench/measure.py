"""Timing and peak-memory measurement of one forward+backward callable.

Time: the callables of one grid cell are timed together, in rounds: one warm-up call of
each, then ``repeats`` rounds that call each once, every round starting one place later
in the list. No callable is always timed first (after the others' allocations and with a
cold cache), and a slow spell of a shared machine falls on all of them alike, so their
ratios hold. Each gets the median wall-clock time of its calls; on CUDA each call is
bracketed by ``torch.cuda.synchronize()``. On CPU also the median process CPU time
(``time.process_time``, all threads), less sensitive to other processes on the machine.

Peak extra memory: the highest number of bytes allocated by tensors during one call,
above what was allocated when it started, minus the ``expected`` bytes the call must
keep (the gradient). CUDA: ``torch.cuda.max_memory_allocated``. CPU: torch has no
allocator statistics, so the call runs once more under ``torch.profiler`` with
``profile_memory=True`` and the allocation/free events of torch's CPU allocator are
summed in time order (tensor storages only; the interpreter and non-torch buffers are
not counted, allocator caching is not modelled).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timing(NamedTuple):
    """Medians over the timed calls: wall-clock seconds, and on CPU the process CPU time
    (all threads), which other processes on a shared machine inflate much less."""

    wall: float
    cpu: float | None


def interleaved_median_times(fns: Sequence[Callable[[], object]], device: torch.device, repeats: int) -> list[Timing]:
    """Median wall-clock (and, on CPU, process CPU) seconds of each of ``fns``, timed in
    rounds (see the module docstring): ``result[i]`` is the timing of ``fns[i]``."""
    for fn in fns:
        fn()
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    for round_index in range(repeats):
        for offset in range(len(fns)):
            index = (round_index + offset) % len(fns)
            _sync(device)
            cpu_start, start = time.process_time(), time.perf_counter()
            fns[index]()
            _sync(device)
            walls[index].append(time.perf_counter() - start)
            cpus[index].append(time.process_time() - cpu_start)
    return [
        Timing(statistics.median(wall), statistics.median(cpu) if device.type == "cpu" else None)
        for wall, cpu in zip(walls, cpus, strict=True)
    ]


def _cpu_peak_bytes(fn: Callable[[], object]) -> int | None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:
        return None
    events = sorted((e.start_ns(), e.nbytes()) for e in results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak


def peak_extra_bytes(
    fn: Callable[[], object], device: torch.device, expected: int, reset: Callable[[], None] | None = None
) -> int | None:
    """Peak bytes allocated during ``fn()`` beyond the start, minus ``expected``; None when
    the CPU profiler gives no memory events.

    ``reset`` runs first, outside the measurement: it must free what ``fn`` would free of
    an earlier call (the previous gradient), or that free would be counted against the
    peak (the CPU profiler records frees of blocks it saw allocated in earlier sessions).
    """
    if reset is not None:
        reset()
    if device.type == "cuda":
        _sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        _sync(device)
        return torch.cuda.max_memory_allocated(device) - base - expected
    peak = _cpu_peak_bytes(fn)
    return None if peak is None else peak - expected
