"""Chunking of ``fused_linear_loss``: the default chunk size (hand-derived values) and the
peak extra memory of a call, read from torch's profiler memory events (``bench.measure``)."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins import fused_linear_loss
from gmpo_plugins.bench import measure
from gmpo_plugins.core.fused_linear import default_chunk_size


@pytest.mark.parametrize(
    ("vocab", "positions", "expected"),
    [
        # min(2**27 // V, max(ceil(N / 8), min(256, ceil(N / 2))))
        (151936, 32768, 883),  # 2**27 // 151936 = 883 < ceil(32768 / 8) = 4096
        (151936, 4096, 512),  # ceil(4096 / 8) = 512 < 883
        (151936, 1024, 256),  # max(128, min(256, 512)) = 256
        (151936, 128, 64),  # max(16, min(256, 64)) = 64: two chunks
        (151936, 3, 2),  # max(1, min(256, 2)) = 2
        (151936, 1, 1),
        (32768, 16384, 2048),  # 2**27 // 32768 = 4096 > ceil(16384 / 8) = 2048
        (2**28, 4096, 1),  # more than 2**27 logits in one position: one position per chunk
    ],
)
def test_default_chunk_size(vocab: int, positions: int, expected: int) -> None:
    assert default_chunk_size(vocab, positions) == expected


@pytest.mark.parametrize("positions", [2, 3, 64, 128, 1000, 4096, 10**6])
def test_default_chunk_always_splits(positions: int) -> None:
    """At least two chunks at every N >= 2, at least eight from N = 2048 on."""
    chunk = default_chunk_size(50000, positions)
    chunks = -(-positions // chunk)
    assert chunks >= (8 if positions >= 2048 else 2)


def test_one_chunk_of_logits_at_a_time() -> None:
    """Peak extra memory of forward+backward at chunk c: one (c, V) float32 block of logits
    plus the per-position vectors and (c, H) temporaries, not two blocks (the previous chunk is
    freed before the next is allocated).

    V = 4096, c = 64: one block is 64 * 4096 * 4 = 1 MiB; N = 512 positions, H = 16: the
    per-position vectors and (c, H) blocks are a few KiB, so the peak lies in [1, 1.25) MiB.
    """
    g = torch.Generator().manual_seed(0)
    b, t, h, v, chunk = 4, 128, 16, 4096, 64
    hidden = torch.randn(b, t, h, generator=g).requires_grad_()
    weight = (torch.randn(v, h, generator=g) * 0.3).requires_grad_()
    targets = torch.randint(0, v, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.bool)
    advantages = torch.randn(b, generator=g)
    old = torch.full((b, t), -8.0)

    def call() -> None:
        fused_linear_loss(
            "gmpo", hidden, weight, targets, old, advantages, mask, chunk_size=chunk, validate=False
        ).loss.backward()

    def reset() -> None:
        hidden.grad = weight.grad = None

    gradients = (hidden.numel() + weight.numel()) * 4
    extra = measure.peak_extra_bytes(call, torch.device("cpu"), gradients, reset)
    if extra is None:
        pytest.skip("torch's profiler gave no memory events")
    block = chunk * v * 4
    assert block <= extra < 1.25 * block, extra / block
