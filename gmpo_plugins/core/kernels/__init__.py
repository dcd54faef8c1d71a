"""Fused forward/backward paths for the registry losses.

``clipped_row_sums`` (one pass over (B, T), backward from (B,) coefficients and a 1-byte
mask) with a blocked torch backend and a Triton backend for CUDA, selected by
``dispatch.select_backend``; ``sequence`` builds the GMPO family and GSPO on top of it.
``token`` fuses the token-level PPO-clip losses (GRPO, DAPO, Dr.GRPO) in blocked torch
(its backward re-reads the inputs instead of saving (B, T) temporaries).
The losses in ``core/losses`` route here unless called with ``impl="eager"`` (the
unfused formulation, kept as the test oracle).
"""

from gmpo_plugins.core.kernels.dispatch import IMPLS, check_impl, select_backend
from gmpo_plugins.core.kernels.rowsum import clipped_row_sums
from gmpo_plugins.core.kernels.sequence import fused_geometric_mean_loss, fused_gspo_loss
from gmpo_plugins.core.kernels.stats import RowStats

FUSED_LOSSES = ("gmpo", "gmpo_noclip", "gmpo_seqclip", "gmpo_nonorm", "gspo", "grpo", "dapo", "dr_grpo")
"""Built-in losses with a fused path; their functions take ``impl`` ("eager" = oracle)."""

__all__ = [
    "FUSED_LOSSES",
    "IMPLS",
    "RowStats",
    "check_impl",
    "clipped_row_sums",
    "fused_geometric_mean_loss",
    "fused_gspo_loss",
    "select_backend",
]
