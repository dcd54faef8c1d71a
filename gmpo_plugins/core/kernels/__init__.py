"""Fused forward/backward paths for the registry losses.

``clipped_row_sums`` (one pass over (B, T), backward from (B,) coefficients and a 1-byte
mask) with a blocked torch backend and a Triton backend for CUDA, selected by
``dispatch.select_backend``; ``sequence`` builds the GMPO family and GSPO on top of it.
``sequence_rows`` wraps that pass and the per-row epilogue in one custom operator per
direction. ``token`` fuses the token-level PPO-clip losses (GRPO, DAPO, Dr.GRPO) in blocked torch
(its backward re-reads the inputs instead of saving (B, T) temporaries).
The losses in ``core/losses`` route here unless called with ``impl="eager"`` (the
unfused formulation, kept as the test oracle); their ``LossSpec.impls`` say which paths they have.
"""

from gmpo_plugins.core.kernels.dispatch import IMPLS, SEQUENCE_IMPLS, TOKEN_IMPLS, check_impl, select_backend
from gmpo_plugins.core.kernels.rowsum import clipped_row_sums
from gmpo_plugins.core.kernels.sequence import fused_geometric_mean_loss, fused_gspo_loss
from gmpo_plugins.core.kernels.stats import RowSums

__all__ = [
    "IMPLS",
    "SEQUENCE_IMPLS",
    "TOKEN_IMPLS",
    "RowSums",
    "check_impl",
    "clipped_row_sums",
    "fused_geometric_mean_loss",
    "fused_gspo_loss",
    "select_backend",
]
