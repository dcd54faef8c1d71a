"""``fused_linear_loss`` against the unfused computation (logits -> log_softmax -> gather ->
the same registry loss): loss, metrics and the gradients of hidden states, weight and bias,
for every built-in loss; chunking, padding, empty inputs, temperature, invariance, bad input."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, fused_linear_loss, get_loss

from ..registry_names import builtin_losses
from .batches import complete
from .test_invariance import chunks

B, T, H, V = 5, 7, 6, 11  # B * T = 35 positions


def problem(seed: int = 0, dtype: torch.dtype = torch.float64, batch_size: int = B, bias: bool = True) -> dict:
    """A random head and batch; row i has 1 + (3 i) % T valid tokens, row 1 none."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([0 if i == 1 else 1 + (3 * i) % T for i in range(batch_size)])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    old = -torch.rand(batch_size, T, generator=g, dtype=dtype) * 3
    return dict(
        hidden=torch.randn(batch_size, T, H, generator=g, dtype=dtype).requires_grad_(),
        weight=(torch.randn(V, H, generator=g, dtype=dtype) * 0.7).requires_grad_(),
        bias=(torch.randn(V, generator=g, dtype=dtype) * 0.3).requires_grad_() if bias else None,
        targets=torch.randint(0, V, (batch_size, T), generator=g),
        old=old,
        ref=old - 0.1,
        advantages=torch.randn(batch_size, generator=g, dtype=dtype),
        mask=mask,
    )


def leaves(p: dict) -> list[torch.Tensor]:
    return [x for x in (p["hidden"], p["weight"], p["bias"]) if x is not None]


def unfused(name: str, p: dict, batch: BatchInfo | None = None, temperature: float = 1.0, **hparams):
    """The oracle: the full (B, T, V) logits, log_softmax, gather, the registry loss."""
    logits = p["hidden"] @ p["weight"].t()
    if p["bias"] is not None:
        logits = logits + p["bias"]
    log_probs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature, -1)
    log_probs = log_probs.gather(-1, p["targets"][..., None]).squeeze(-1)
    inputs = LossInputs(log_probs, p["old"], p["advantages"], p["mask"], ref_log_probs=p["ref"], **extra(name, p))
    return get_loss(name)(inputs, batch, **hparams)


def extra(name: str, p: dict) -> dict:
    """The optional inputs loss ``name`` requires (``batches.complete``), from ``p``."""
    filled = complete(LossInputs(p["old"], p["old"], p["advantages"], p["mask"]), name)
    return {field: getattr(filled, field) for field in get_loss(name).requires}


def fused(name: str, p: dict, batch: BatchInfo | None = None, **options):
    return fused_linear_loss(
        name,
        p["hidden"],
        p["weight"],
        p["targets"],
        p["old"],
        p["advantages"],
        p["mask"],
        batch,
        bias=p["bias"],
        ref_log_probs=p["ref"],
        **extra(name, p),
        **options,
    )


def grads(loss: torch.Tensor, p: dict) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, leaves(p)))


HPARAMS = {name: {} for name in builtin_losses()} | {"gmpo": {"kl_beta": 0.1}, "grpo": {"kl_beta": 0.05}}


@pytest.mark.parametrize("chunk_size", [1, 5, 8, 35, 64])  # divides B*T = 35 or not, one chunk, more than all
@pytest.mark.parametrize("name", builtin_losses())
def test_equals_unfused_float64(name: str, chunk_size: int) -> None:
    p = problem(seed=chunk_size)
    want = unfused(name, p, **HPARAMS[name])
    got = fused(name, p, chunk_size=chunk_size, **HPARAMS[name])
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-10, atol=1e-12)
    for key, value in want.metrics.items():
        torch.testing.assert_close(got.metrics[key], value, rtol=1e-10, atol=1e-12, msg=key)
    for g_got, g_want in zip(grads(got.loss, p), grads(want.loss, p), strict=True):
        torch.testing.assert_close(g_got, g_want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", builtin_losses())
def test_equals_unfused_float32(name: str) -> None:
    """float32: the products of a chunk and of the whole (B*T, H) x (H, V) may sum in another
    order, ~1e-7 relative per logit; through log_softmax and exp(mean) of the GMPO family that
    stays below 1e-5 relative, with atol for the gradients' near-zero entries."""
    p = problem(seed=3, dtype=torch.float32)
    want = unfused(name, p, **HPARAMS[name])
    got = fused(name, p, chunk_size=4, **HPARAMS[name])
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)
    for g_got, g_want in zip(grads(got.loss, p), grads(want.loss, p), strict=True):
        torch.testing.assert_close(g_got, g_want, rtol=1e-5, atol=1e-6)


def test_temperature_and_entropy() -> None:
    """log_p of logits / tau; entropy = -sum p log p of the same distribution, mean over the
    valid tokens, and 0 at padding."""
    p = problem(seed=5)
    want = unfused("gmpo", p, temperature=0.7)
    got = fused("gmpo", p, temperature=0.7, chunk_size=3)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-10, atol=1e-12)
    for g_got, g_want in zip(grads(got.loss, p), grads(want.loss, p), strict=True):
        torch.testing.assert_close(g_got, g_want, rtol=1e-10, atol=1e-12)
    logits = (p["hidden"] @ p["weight"].t() + p["bias"]).detach() / 0.7
    log_p = torch.log_softmax(logits, -1)
    entropy = torch.where(p["mask"], -(log_p.exp() * log_p).sum(-1), 0.0)
    torch.testing.assert_close(got.entropy, entropy, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got.metrics["entropy"], entropy.sum() / p["mask"].sum(), rtol=1e-10, atol=0)
    torch.testing.assert_close(
        got.log_probs, torch.where(p["mask"], log_p.gather(-1, p["targets"][..., None])[..., 0], 0.0)
    )


def test_padding_garbage_and_no_bias() -> None:
    """NaN hidden states and out-of-range ids at padding change nothing: the result equals the
    one with zeros there, and padding positions get a zero gradient."""
    p = problem(seed=7, bias=False)
    clean = fused("gspo", p, chunk_size=6)
    clean_grads = grads(clean.loss, p)
    dirty = dict(p)
    pad = ~p["mask"]
    dirty["hidden"] = torch.where(pad[..., None], torch.nan, p["hidden"].detach()).requires_grad_()
    dirty["targets"] = torch.where(pad, 10**6, p["targets"])
    got = fused("gspo", dirty, chunk_size=6)
    dirty_grads = grads(got.loss, dirty)
    torch.testing.assert_close(got.loss, clean.loss, rtol=0, atol=0)
    torch.testing.assert_close(dirty_grads[1], clean_grads[1], rtol=1e-12, atol=1e-14)
    assert torch.isfinite(dirty_grads[0]).all()
    assert (dirty_grads[0][pad] == 0).all()
    torch.testing.assert_close(dirty_grads[0], clean_grads[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("batch_size", [0, 1])
def test_empty_batch_and_single_row(batch_size: int) -> None:
    """B = 0 (a padding rank): loss 0 and zero gradients of the right shapes; B = 1: one row
    with one valid token."""
    p = problem(seed=2, batch_size=batch_size)
    got = fused("gmpo", p, chunk_size=4)
    want = unfused("gmpo", p)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-10, atol=1e-12)
    for g_got, g_want in zip(grads(got.loss, p), grads(want.loss, p), strict=True):
        assert g_got.shape == g_want.shape
        torch.testing.assert_close(g_got, g_want, rtol=1e-10, atol=1e-12)
    if batch_size == 0:
        assert float(got.loss.detach()) == 0.0 and float(got.metrics["entropy"]) == 0.0


@pytest.mark.parametrize("name", ["gmpo", "grpo", "gspo"])
@pytest.mark.parametrize(("ranks", "micro"), [(1, 2), (2, 1), (2, 3)])
def test_micro_batch_and_data_parallel_invariance(name: str, ranks: int, micro: int) -> None:
    """Each rank accumulates its micro-batches' gradients (BatchInfo with the global counts),
    ranks are averaged as DDP does: the whole batch's gradient of hidden, weight and bias."""
    p = problem(seed=11, batch_size=6)
    mask = p["mask"]
    info = BatchInfo(dp_size=ranks, global_batch_size=int(mask.any(-1).sum()), global_num_tokens=int(mask.sum()))
    whole = grads(fused(name, p, BatchInfo(), chunk_size=5).loss, p)
    total = [torch.zeros_like(x) for x in whole]
    for rank_rows in chunks(6, ranks):
        for piece in chunks(rank_rows.stop - rank_rows.start, micro):
            rows = slice(rank_rows.start + piece.start, rank_rows.start + piece.stop)
            shard = {k: (v if k in ("weight", "bias") else v[rows]) for k, v in p.items()}
            shard["hidden"] = p["hidden"]  # sliced inside the graph, so its gradient lands in the full tensor
            shard_hidden = p["hidden"][rows]
            out = fused_linear_loss(
                name,
                shard_hidden,
                p["weight"],
                shard["targets"],
                shard["old"],
                shard["advantages"],
                shard["mask"],
                info,
                bias=p["bias"],
                chunk_size=5,
            )
            for acc, g in zip(total, torch.autograd.grad(out.loss, leaves(p), allow_unused=True), strict=True):
                if g is not None:
                    acc.add_(g / ranks)
    for g_got, g_want in zip(total, whole, strict=True):
        torch.testing.assert_close(g_got, g_want, rtol=1e-10, atol=1e-12)


def test_no_grad_forward_and_frozen_head() -> None:
    """Under no_grad the loss is the same value; a frozen head (LoRA) still trains the hidden
    states and leaves weight without a gradient."""
    p = problem(seed=4)
    with torch.no_grad():
        value = fused("gmpo", p).loss
    frozen = dict(p, weight=p["weight"].detach(), bias=None)
    out = fused("gmpo", frozen)
    torch.testing.assert_close(value, fused("gmpo", p).loss)
    (grad_hidden,) = torch.autograd.grad(out.loss, [frozen["hidden"]])
    assert grad_hidden.abs().sum() > 0


@pytest.mark.parametrize(
    ("change", "argument"),
    [
        (dict(weight=torch.zeros(V, H + 1, dtype=torch.float64, requires_grad=True)), "weight"),
        (dict(targets=torch.full((B, T), V)), "targets"),
        (dict(targets=torch.full((B, T), -1)), "targets"),
        (dict(chunk_size=0), "chunk_size"),
        (dict(temperature=0.0), "temperature"),
        (
            dict(weight=torch.zeros(V, H, dtype=torch.float64), hidden=torch.zeros(B, T, H, dtype=torch.float64)),
            "weight",
        ),
        (dict(bias=torch.zeros(V + 1, dtype=torch.float64)), "bias"),
        (dict(hidden=torch.zeros(B, T, dtype=torch.float64, requires_grad=True)), "hidden_states"),
    ],
)
def test_bad_input_names_the_argument(change: dict, argument: str) -> None:
    p = problem(seed=1)
    options = {k: change.pop(k) for k in ("chunk_size", "temperature") if k in change}
    p.update(change)
    with pytest.raises(ValueError, match=f"^{argument}: "):
        fused("gmpo", p, **options)


def test_missing_old_log_probs_are_the_current_ones() -> None:
    """old_log_probs=None: the ratio is 1, as with old = the unfused log-probs detached."""
    p = problem(seed=9)
    logits = p["hidden"] @ p["weight"].t() + p["bias"]
    log_probs = torch.log_softmax(logits, -1).gather(-1, p["targets"][..., None]).squeeze(-1)
    want = get_loss("gmpo")(LossInputs(log_probs, log_probs.detach(), p["advantages"], p["mask"]))
    got = fused("gmpo", dict(p, old=None, ref=None))
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-12, atol=1e-14)
    for g_got, g_want in zip(grads(got.loss, p), grads(want.loss, p), strict=True):
        torch.testing.assert_close(g_got, g_want, rtol=1e-10, atol=1e-12)


# Dynamo instantiates the autograd.Function while tracing it, and torch warns about its own doing
@pytest.mark.filterwarnings("ignore:.*torch.autograd.function.Function'> should not be instantiated:DeprecationWarning")
def test_compiles_as_one_graph() -> None:
    """torch.compile(fullgraph=True) traces the chunk loop and the autograd.Function (backend
    aot_eager, which also traces the backward): the same loss and gradients."""
    p = problem(seed=12, bias=False)

    def step(hidden, weight):
        return fused_linear_loss(
            "gmpo", hidden, weight, p["targets"], p["old"], p["advantages"], p["mask"], chunk_size=16, validate=False
        ).loss

    want = step(p["hidden"], p["weight"])
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(p["hidden"], p["weight"])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    for g_got, g_want in zip(grads(got, p), grads(want, p), strict=True):
        torch.testing.assert_close(g_got, g_want, rtol=1e-12, atol=1e-14)
