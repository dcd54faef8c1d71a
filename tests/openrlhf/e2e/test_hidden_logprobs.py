"""``GMPO_OPENRLHF_HIDDEN_LOGPROBS=1`` in OpenRLHF's real train_ppo_ray loop on CPU: one fp32 step of
``gmpo-openrlhf --actor.policy_loss_type gmpo`` with the KL loss (so the reference model's forward runs
too) gives the weight update of the same step without the setting, and the hidden-state path ran in the
actor and reference workers.

The set-up and the measure are those of ``invariance`` (the same 4 seeded samples, one optimizer step,
Adam with ``eps`` far above the gradients so the update is ``(lr / eps) g``; ``|delta - delta_ref| /
|delta_ref|`` over all weights). Tolerance ``1e-4``, as for the invariance runs: both steps compute the
same float32 log-softmax of the same logits, the hidden-state path in chunks and in another summation
order (the logsumexp over the vocabulary, the weight gradient over chunks of positions). A wrong
temperature, a shifted target or a missing gradient term moves the update by far more.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gmpo_plugins.adapters.openrlhf.hidden_logprobs import ENV
from tests.openrlhf.e2e.invariance import relative_difference, step_args, update
from tests.openrlhf.e2e.runner import SHIMS, STANDINS, initial_weights, run_gmpo_openrlhf

pytestmark = [pytest.mark.ray, pytest.mark.timeout(1800)]
TOLERANCE = 1e-4
KL = ("--algo.kl.use_loss", "--algo.kl.estimator", "k3", "--algo.kl.init_coef", "0.01")
# the driver and its Ray workers import this checkout's gmpo_plugins, the one under test
# (and Ray prints every worker's line: its deduplication would fold one process's announcement into another's)
CHECKOUT = {
    "PYTHONPATH": os.pathsep.join([str(STANDINS), str(SHIMS), str(Path(__file__).parents[3])]),
    "RAY_DEDUP_LOGS": "0",
}


def _announced_by(output: str) -> set[str]:
    """The Ray actors (class names) whose process announced the hidden-state path: the
    announcement names its pid, Ray's line prefixes name each pid's actor."""
    pids = set(re.findall(rf"{ENV}=1: Actor log-probs from the hidden states and the lm_head \(pid (\d+)\)", output))
    return {name for name, pid in re.findall(r"\((\w+) pid=(\d+)\)", output) if pid in pids}


def test_the_step_equals_the_step_without_the_setting(fixtures, tmp_path):
    args = step_args("gmpo", "seq-mean-token-mean", 4, KL)
    plain = run_gmpo_openrlhf(fixtures, tmp_path / "plain", args, extra_env=CHECKOUT).check()
    hidden = run_gmpo_openrlhf(fixtures, tmp_path / "hidden", args, extra_env={**CHECKOUT, ENV: "1"}).check()
    before = initial_weights(fixtures["model"])
    reference = update(plain, before)
    difference = relative_difference(update(hidden, before), reference)
    print(f"relative difference of the updates: {difference:.1e}")  # shown with pytest -s or -rP
    assert difference <= TOLERANCE
    assert sum(float(delta.abs().sum()) for delta in reference.values()) > 0
    assert {"PolicyModelActor", "ReferenceModelActor"} <= _announced_by(hidden.output), hidden.output[-4000:]
    assert not _announced_by(plain.output) and f"{ENV}=1" not in plain.output
