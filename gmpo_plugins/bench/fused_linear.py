"""The fused-linear section of ``gmpo-plugins bench --fused-linear``: a registry loss from hidden
states and the lm_head weight (``core.fused_linear``) against the unfused path and Liger-Kernel.

For each vocabulary x hidden size (V, H) and B x T positions, one forward+backward of:

    unfused       logits (B, T, V) = h W^T, float log_softmax, gather, the registry loss
    fused         ``fused_linear_loss`` with ``chunk_size`` positions per chunk
    liger         Liger-Kernel's ``LigerFusedLinearGRPOLoss(loss_type="grpo")`` (when
                  importable), ``chunk_size / T`` sequences per chunk (so the same positions
                  per chunk), ``compiled`` on CUDA only (compiling takes minutes on CPU)

for gmpo and grpo (Liger has no gmpo). Time and peak extra memory are measured as in the rest
of the bench (``measure``): interleaved medians (CPU: process CPU time too), and the peak bytes
of tensors allocated during the call beyond the gradients of h and W it must return. Inputs
are float32, every position valid, advantages of both signs, old log-probs = the current ones
plus noise (so some tokens are clipped).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gmpo_plugins.bench import measure
from gmpo_plugins.core.fused_linear import fused_linear_loss
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import LossInputs

LOSSES = ("gmpo", "grpo")
DEFAULT_HEADS = ((32768, 1024), (151936, 4096))
TARGET_MEMORY = 1 / 8  # fused peak extra memory over unfused, at the largest V
TARGET_TIME = 1.3  # fused time over unfused (CPU time on CPU)


def _problem(vocab: int, hidden: int, batch: int, length: int, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(0)
    h = torch.randn(batch, length, hidden, generator=g).to(device).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=g) * hidden**-0.5).to(device).requires_grad_()
    targets = torch.randint(0, vocab, (batch, length), generator=g).to(device)
    with torch.no_grad():
        current = torch.log_softmax(h @ w.t(), -1).gather(-1, targets[..., None])[..., 0]
    old = current + 0.3 * torch.randn(batch, length, generator=g).to(device)
    advantages = torch.randn(batch, generator=g).to(device)
    mask = torch.ones_like(targets, dtype=torch.bool)
    return dict(h=h, w=w, targets=targets, old=old, advantages=advantages, mask=mask)


def _variants(p: dict, chunk_size: int, device: torch.device) -> dict[tuple[str, str], Callable[[], object]]:
    def unfused(name: str) -> Callable[[], object]:
        def call() -> None:
            logits = p["h"] @ p["w"].t()
            log_probs = torch.log_softmax(logits.float(), -1).gather(-1, p["targets"][..., None])[..., 0]
            inputs = LossInputs(log_probs, p["old"], p["advantages"], p["mask"])
            get_loss(name)(inputs, validate=False).loss.backward()

        return call

    def fused(name: str) -> Callable[[], object]:
        def call() -> None:
            out = fused_linear_loss(
                name, p["h"], p["w"], p["targets"], p["old"], p["advantages"], p["mask"], chunk_size=chunk_size,
                validate=False,
            )  # fmt: skip
            out.loss.backward()

        return call

    variants = {(name, kind): make(name) for name in LOSSES for kind, make in (("unfused", unfused), ("fused", fused))}
    try:
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss
    except ImportError:
        return variants
    liger = LigerFusedLinearGRPOLoss(
        beta=0.0,
        compiled=device.type == "cuda",
        use_ref_model=False,
        chunk_size=max(1, chunk_size // p["h"].shape[1]),
        loss_type="grpo",
    )

    def liger_call() -> None:
        loss, _ = liger(p["h"], p["w"], p["targets"], p["mask"], p["advantages"], old_per_token_logps=p["old"])
        loss.backward()

    variants[("grpo", "liger")] = liger_call
    return variants


def run_fused_linear(
    heads: list[tuple[int, int]],
    batch: int,
    length: int,
    chunk_size: int,
    device: torch.device,
    repeats: int,
    progress: Callable[[str], None] = lambda message: None,
) -> dict:
    """Rows (one per head x loss x variant) and targets; see the module docstring."""
    rows: list[dict] = []
    for vocab, hidden in heads:
        progress(f"fused-linear V={vocab} H={hidden} B={batch} T={length} chunk={chunk_size}")
        p = _problem(vocab, hidden, batch, length, device)
        variants = _variants(p, chunk_size, device)

        def reset(p: dict = p) -> None:
            p["h"].grad = p["w"].grad = None

        expected = (p["h"].numel() + p["w"].numel()) * p["w"].element_size()
        timings = measure.interleaved_median_times(list(variants.values()), device, repeats)
        for (name, kind), fn, timing in zip(variants, variants.values(), timings, strict=True):
            extra = measure.peak_extra_bytes(fn, device, expected, reset)
            seconds = timing.cpu if timing.cpu is not None else timing.wall
            rows.append(
                dict(
                    vocab=vocab, hidden=hidden, loss=name, variant=kind, tokens=batch * length,
                    median_ms=1e3 * timing.wall, cpu_ms=None if timing.cpu is None else 1e3 * timing.cpu,
                    ns_per_token=1e9 * seconds / (batch * length), extra_bytes=extra,
                )
            )  # fmt: skip
        reset()
    _ratios(rows)
    return {"rows": rows, "targets": _targets(rows, max(v for v, _ in heads))}


def _ratios(rows: list[dict]) -> None:
    """x_unfused (time, memory) against the unfused row of the same head and loss (Liger's
    against unfused grpo)."""
    for row in rows:
        key = (row["vocab"], row["hidden"], row["loss"], "unfused")
        base = next(r for r in rows if (r["vocab"], r["hidden"], r["loss"], r["variant"]) == key)
        row["x_unfused_time"] = row["ns_per_token"] / base["ns_per_token"]
        both = row["extra_bytes"] is not None and base["extra_bytes"]
        row["x_unfused_memory"] = row["extra_bytes"] / base["extra_bytes"] if both else None


def _targets(rows: list[dict], vocab: int) -> list[dict]:
    """The issue's three targets at the largest V, for gmpo (and grpo), met or not."""
    found = []
    for row in rows:
        if row["vocab"] != vocab or row["variant"] != "fused":
            continue
        where = f"{row['loss']} V={row['vocab']} H={row['hidden']}"
        memory, time = row["x_unfused_memory"], row["x_unfused_time"]
        if memory is not None:
            found.append(
                dict(target=f"{where}: fused extra memory <= 1/8 of unfused", value=memory, met=memory <= TARGET_MEMORY)
            )
        found.append(dict(target=f"{where}: fused time <= {TARGET_TIME}x unfused", value=time, met=time <= TARGET_TIME))
        liger = [r for r in rows if (r["vocab"], r["hidden"], r["variant"]) == (row["vocab"], row["hidden"], "liger")]
        if liger:
            ratio = row["ns_per_token"] / liger[0]["ns_per_token"]
            found.append(dict(target=f"{where}: fused no slower than Liger grpo", value=ratio, met=ratio <= 1.0))
    return found


def to_markdown(result: dict) -> str:
    """The rows and targets as Markdown tables."""
    lines = [
        "| V | H | loss | path | ms (wall) | ms (CPU) | ns/token | x unfused time | extra MiB | x unfused memory |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        cpu = "" if r["cpu_ms"] is None else f"{r['cpu_ms']:.0f}"
        mib = "" if r["extra_bytes"] is None else f"{r['extra_bytes'] / 2**20:.1f}"
        mem = "" if r["x_unfused_memory"] is None else f"{r['x_unfused_memory']:.3f}"
        lines.append(
            f"| {r['vocab']} | {r['hidden']} | {r['loss']} | {r['variant']} | {r['median_ms']:.0f} | {cpu} | "
            f"{r['ns_per_token']:.0f} | {r['x_unfused_time']:.2f} | {mib} | {mem} |"
        )
    lines += ["", "| target | value | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['value']:.3f} | {'yes' if t['met'] else 'no'} |" for t in result["targets"]]
    return "\n".join(lines) + "\n"
