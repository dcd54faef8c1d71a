"""The fused-linear section of ``gmpo-plugins bench --fused-linear``: per-token log-probs and a
policy loss from hidden states and the lm_head weight, by every path installed, at one shape.

For each vocabulary x hidden size (V, H) and B x T positions, one forward+backward of:

    unfused            logits (B, T, V) = h W^T, float log_softmax, gather, the gmpo loss
    fused_linear_loss  ``core.fused_linear.fused_linear_loss`` (gmpo, with the entropy metric),
                       at ``chunk_size`` positions per chunk (None: its default)
    trl                TRL's ``trl.kernels.ChunkedLogProbFunction`` (the function behind its
                       ``add_fused_lm_head``, called as GRPOTrainer calls it: log-probs and
                       entropy, TRL's vocabulary chunk), then the gmpo loss
    verl               verl's ``FusedLinearForPPO(impl_backend="torch")`` (what
                       ``use_fused_kernels`` runs with verl's default backend; its chunk of
                       512 positions), then the gmpo loss. verl's Triton backend
                       (``verl.utils.kernel.linear_cross_entropy``) needs CUDA
    liger              Liger-Kernel's ``LigerFusedLinearGRPOLoss(loss_type="grpo")`` (Liger
                       has no gmpo; its default chunk of one sequence), ``compiled`` on CUDA
                       only (compiling takes minutes on CPU)

each where its package imports (the others are listed in ``missing``, with why). The policy
loss after the log-probs costs well under a millisecond at these sizes, against seconds for
the head, so all paths are compared with the unfused gmpo row. Time and peak extra memory as
in the rest of the bench (``measure``): interleaved medians (CPU: process CPU time too, the
ratios on it), and the peak bytes of tensors allocated during the call beyond the gradients
of h and W it must return. Inputs are float32, every position valid, advantages of both
signs, old log-probs = the current ones plus noise (so some tokens are clipped).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gmpo_plugins.bench import measure
from gmpo_plugins.core.fused_linear import default_chunk_size, fused_linear_loss
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import LossInputs

DEFAULT_HEADS = ((32768, 1024), (151936, 1024))
TARGET_MEMORY = 1 / 8  # fused_linear_loss peak extra memory over unfused, at the largest V
TARGET_TIME = 1.5  # fused_linear_loss time over unfused (CPU time on CPU), at the largest V
AS_GOOD = 1.1  # another path is "as good" when within 10% of fused_linear_loss on time and memory
VERL_CHUNK = 512  # FusedLinearForPPO's default chunk_size

Call = Callable[[], object]


def _problem(vocab: int, hidden: int, batch: int, length: int, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(0)
    h = torch.randn(batch, length, hidden, generator=g).to(device).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=g) * hidden**-0.5).to(device).requires_grad_()
    targets = torch.randint(0, vocab, (batch, length), generator=g).to(device)
    with torch.no_grad():
        current = torch.cat([torch.log_softmax(h[i] @ w.t(), -1).gather(-1, targets[i, :, None]) for i in range(batch)])
    old = current.view(batch, length) + 0.3 * torch.randn(batch, length, generator=g).to(device)
    advantages = torch.randn(batch, generator=g).to(device)
    mask = torch.ones_like(targets, dtype=torch.bool)
    return dict(h=h, w=w, targets=targets, old=old, advantages=advantages, mask=mask)


def _gmpo_backward(p: dict, log_probs: torch.Tensor) -> None:
    inputs = LossInputs(log_probs, p["old"], p["advantages"], p["mask"])
    get_loss("gmpo")(inputs, validate=False).loss.backward()


def _unfused(p: dict) -> Call:
    def call() -> None:
        logits = p["h"] @ p["w"].t()
        _gmpo_backward(p, torch.log_softmax(logits.float(), -1).gather(-1, p["targets"][..., None])[..., 0])

    return call


def _fused(p: dict, chunk_size: int | None) -> Call:
    def call() -> None:
        fused_linear_loss(
            "gmpo", p["h"], p["w"], p["targets"], p["old"], p["advantages"], p["mask"], chunk_size=chunk_size,
            validate=False,
        ).loss.backward()  # fmt: skip

    return call


def _trl(p: dict) -> Call:
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    def call() -> None:
        h = p["h"].reshape(-1, p["h"].shape[-1])
        log_probs, _entropy, *_ = ChunkedLogProbFunction.apply(
            h, p["w"], None, p["targets"].reshape(-1), 1.0, _CHUNKED_LOGPROB_CHUNK_SIZE, None, 1.0,
            ("log_probs", "entropy"),
        )  # fmt: skip
        _gmpo_backward(p, log_probs.view(p["targets"].shape))

    return call


def _verl(p: dict) -> Call:
    from verl.utils.experimental.torch_functional import FusedLinearForPPO

    head = FusedLinearForPPO(chunk_size=VERL_CHUNK, impl_backend="torch")

    def call() -> None:
        log_probs, _entropy = head(p["h"], p["w"], p["targets"])
        _gmpo_backward(p, log_probs)

    return call


def _liger(p: dict, device: torch.device) -> Call:
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    liger = LigerFusedLinearGRPOLoss(beta=0.0, compiled=device.type == "cuda", use_ref_model=False, loss_type="grpo")

    def call() -> None:
        loss, _ = liger(p["h"], p["w"], p["targets"], p["mask"], p["advantages"], old_per_token_logps=p["old"])
        loss.backward()

    return call


def _paths(p: dict, chunk_size: int | None, device: torch.device) -> tuple[dict[str, tuple[str, Call]], list[str]]:
    """{path: (loss, call)} for every path that imports, and why the others are missing."""
    paths: dict[str, tuple[str, Call]] = {
        "unfused": ("gmpo", _unfused(p)),
        "fused_linear_loss": ("gmpo", _fused(p, chunk_size)),
    }
    missing = []
    optional: list[tuple[str, str, Callable[[], Call]]] = [
        ("trl", "gmpo", lambda: _trl(p)),
        ("verl", "gmpo", lambda: _verl(p)),
        ("liger", "grpo", lambda: _liger(p, device)),
    ]
    for name, loss, make in optional:
        try:
            paths[name] = (loss, make())
        except ImportError as exc:
            missing.append(f"{name}: not importable ({exc})")
    if device.type != "cuda":
        missing.append("verl's Triton backend (verl.utils.kernel.linear_cross_entropy): CUDA only")
    return paths, missing


def run_fused_linear(
    heads: list[tuple[int, int]],
    batch: int,
    length: int,
    chunk_size: int | None,
    device: torch.device,
    repeats: int,
    progress: Callable[[str], None] = lambda message: None,
) -> dict:
    """Rows (one per head x path), targets and comparisons; see the module docstring."""
    rows: list[dict] = []
    missing: list[str] = []
    for vocab, hidden in heads:
        chunk = default_chunk_size(vocab, batch * length) if chunk_size is None else chunk_size
        progress(f"fused-linear V={vocab} H={hidden} B={batch} T={length} chunk={chunk}")
        p = _problem(vocab, hidden, batch, length, device)
        paths, missing = _paths(p, chunk_size, device)

        def reset(p: dict = p) -> None:
            p["h"].grad = p["w"].grad = None

        expected = (p["h"].numel() + p["w"].numel()) * p["w"].element_size()
        timings = measure.interleaved_median_times([call for _, call in paths.values()], device, repeats)
        for (name, (loss, call)), timing in zip(paths.items(), timings, strict=True):
            progress(f"fused-linear V={vocab} H={hidden}: memory of {name}")
            extra = measure.peak_extra_bytes(call, device, expected, reset)
            seconds = timing.cpu if timing.cpu is not None else timing.wall
            rows.append(
                dict(
                    vocab=vocab, hidden=hidden, path=name, loss=loss, tokens=batch * length,
                    chunk=chunk if name == "fused_linear_loss" else None,
                    median_ms=1e3 * timing.wall, cpu_ms=None if timing.cpu is None else 1e3 * timing.cpu,
                    seconds=seconds, extra_bytes=extra,
                )
            )  # fmt: skip
        reset()
        del p, paths
    _ratios(rows)
    largest = max(v for v, _ in heads)
    return {
        "versions": _versions(),
        "rows": rows,
        "targets": _targets(rows, largest),
        "comparisons": _comparisons(rows),
        "missing": missing,
    }


def _versions() -> dict[str, str]:
    """The installed versions of the packages whose paths were measured."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("trl", "verl", "liger-kernel"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def _ratios(rows: list[dict]) -> None:
    """x_unfused (time, memory): against the unfused row of the same head."""
    for row in rows:
        base = next(r for r in rows if (r["vocab"], r["hidden"], r["path"]) == (row["vocab"], row["hidden"], "unfused"))
        row["x_unfused_time"] = row["seconds"] / base["seconds"]
        both = row["extra_bytes"] is not None and base["extra_bytes"]
        row["x_unfused_memory"] = row["extra_bytes"] / base["extra_bytes"] if both else None


def _targets(rows: list[dict], vocab: int) -> list[dict]:
    """fused_linear_loss against unfused at the largest V: memory <= 1/8, time <= 1.5x."""
    found = []
    for row in rows:
        if row["vocab"] != vocab or row["path"] != "fused_linear_loss":
            continue
        where = f"V={row['vocab']} H={row['hidden']} N={row['tokens']}"
        memory, time = row["x_unfused_memory"], row["x_unfused_time"]
        if memory is not None:
            found.append(
                dict(
                    target=f"{where}: fused_linear_loss extra memory <= 1/8 of unfused",
                    value=memory, met=memory <= TARGET_MEMORY,
                )
            )  # fmt: skip
        found.append(
            dict(
                target=f"{where}: fused_linear_loss time <= {TARGET_TIME}x unfused", value=time, met=time <= TARGET_TIME
            )
        )
    return found


def _comparisons(rows: list[dict]) -> list[dict]:
    """Each other fused path against fused_linear_loss on the same head: its time and memory
    over fused_linear_loss's, and whether it is as good (within 10% on both)."""
    out = []
    for row in rows:
        if row["path"] in ("unfused", "fused_linear_loss"):
            continue
        key = (row["vocab"], row["hidden"], "fused_linear_loss")
        ours = next(r for r in rows if (r["vocab"], r["hidden"], r["path"]) == key)
        time = row["seconds"] / ours["seconds"]
        memory = None if not (row["extra_bytes"] and ours["extra_bytes"]) else row["extra_bytes"] / ours["extra_bytes"]
        out.append(
            dict(
                vocab=row["vocab"], hidden=row["hidden"], path=row["path"], x_fused_time=time,
                x_fused_memory=memory, as_good=time <= AS_GOOD and memory is not None and memory <= AS_GOOD,
            )
        )  # fmt: skip
    return out


def to_markdown(result: dict) -> str:
    """The rows, targets and comparisons as Markdown tables."""
    lines = [
        "| V | H | path | loss | positions per chunk | ms (wall) | ms (CPU) | x unfused time | extra MiB | "
        "x unfused memory |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        cpu = "" if r["cpu_ms"] is None else f"{r['cpu_ms']:.0f}"
        mib = "" if r["extra_bytes"] is None else f"{r['extra_bytes'] / 2**20:.1f}"
        mem = "" if r["x_unfused_memory"] is None else f"{r['x_unfused_memory']:.3f}"
        chunk = "" if r["chunk"] is None else str(r["chunk"])
        lines.append(
            f"| {r['vocab']} | {r['hidden']} | {r['path']} | {r['loss']} | {chunk} | {r['median_ms']:.0f} | {cpu} | "
            f"{r['x_unfused_time']:.2f} | {mib} | {mem} |"
        )
    lines += ["", "| target | value | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['value']:.3f} | {'yes' if t['met'] else 'no'} |" for t in result["targets"]]
    if result["comparisons"]:
        lines += [
            "",
            "| V | H | path | time / fused_linear_loss | memory / fused_linear_loss | within 10% on both |",
            "|---|---|---|---|---|---|",
        ]
        for c in result["comparisons"]:
            mem = "" if c["x_fused_memory"] is None else f"{c['x_fused_memory']:.2f}"
            lines.append(
                f"| {c['vocab']} | {c['hidden']} | {c['path']} | {c['x_fused_time']:.2f} | {mem} | "
                f"{'yes' if c['as_good'] else 'no'} |"
            )
    if result["missing"]:
        lines += ["", *[f"- not measured: {why}" for why in result["missing"]]]
    return "\n".join(lines) + "\n"
