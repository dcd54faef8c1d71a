"""The registry loss's metrics of every OpenRLHF micro-batch, one JSON line each, appended to the
file named by ``GMPO_PLUGINS_OPENRLHF_METRICS`` (nothing is written without it)::

    {"rank": r, "tokens": valid tokens, "sequences": rows with a valid token,
     "metrics": {core metric key: value}}

OpenRLHF's logger shows these metrics too, as ``train/gmpo/<key>`` (``logged_metrics``), but
reduced by OpenRLHF's weighted means over micro-batches, ranks and optimiser steps, which cannot
give a minimum or maximum. This file carries them with the counts they were taken over, so a
reader aggregates them exactly, extrema included
(``gmpo_plugins.frameworks.metrics.openrlhf_loss_records``). Writing it reads every metric to
the host once per micro-batch; leave the variable unset for training runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import torch

METRICS_FILE_ENV = "GMPO_PLUGINS_OPENRLHF_METRICS"


def record_loss_metrics(metrics: Mapping[str, torch.Tensor], mask: torch.Tensor) -> None:
    """Append one line for a micro-batch's ``metrics`` (0-dim tensors) over ``mask`` (B, T)."""
    path = os.environ.get(METRICS_FILE_ENV)
    if not path:
        return
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    valid = mask.to(torch.bool)
    line = {
        "rank": rank,
        "tokens": int(valid.sum()),
        "sequences": int(valid.any(dim=-1).sum()),
        "metrics": {key: float(value.detach().float()) for key, value in metrics.items()},
    }
    with open(path, "a") as handle:
        handle.write(json.dumps(line) + "\n")
