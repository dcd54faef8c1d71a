"""``GMPO_OPENRLHF_HIDDEN_LOGPROBS=1`` in OpenRLHF's real train_ppo_ray loop on CPU: one fp32 step of
``gmpo-openrlhf --actor.policy_loss_type gmpo`` with the KL loss (so the reference model's forward runs
too) gives the weight update of the same step without the setting, under ZeRO-2 and under ZeRO-3, and the
hidden-state path ran in the actor and reference workers.

Under ZeRO-3 the path runs inside DeepSpeed's ZeRO-3 engine and module hooks in both workers (the
path's marker of the test-only sitecustomize records each head call). The tiny head (64 x 32 = 2048
elements) is below DeepSpeed's persistence threshold (1e5 elements; OpenRLHF asks for "auto"), so
ZeRO-3 keeps it whole here; the gather of a partitioned head (152K x 32) is exercised in one process
by ``python -m tests.openrlhf.hidden_logprobs_memory --zero3`` (docs/integrations/openrlhf.md).

The set-up and the measure are those of ``invariance`` (the same 4 seeded samples, one optimizer step,
Adam with ``eps`` far above the gradients so the update is ``(lr / eps) g``; ``|delta - delta_ref| /
|delta_ref|`` over all weights). Tolerance ``1e-4``, as for the invariance runs: both steps compute the
same float32 log-softmax of the same logits, the hidden-state path in chunks and in another summation
order (the logsumexp over the vocabulary, the weight gradient over chunks of positions). A wrong
temperature, a shifted target or a missing gradient term moves the update by far more.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from gmpo_plugins.adapters.openrlhf.hidden_logprobs import ENV
from tests.openrlhf.e2e.fixtures import VOCAB
from tests.openrlhf.e2e.invariance import relative_difference, step_args, update
from tests.openrlhf.e2e.runner import SHIMS, STANDINS, initial_weights, run_gmpo_openrlhf

pytestmark = [pytest.mark.ray, pytest.mark.timeout(1800)]
TOLERANCE = 1e-4
HIDDEN = 32  # the tiny Llama's hidden size (tests.tiny_models)
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


def _head_calls(run) -> list[dict]:
    path = run.out / "record" / "head_calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_step_equals_the_step_without_the_setting(fixtures, tmp_path):
    args = step_args("gmpo", "seq-mean-token-mean", 4, KL)
    plain = run_gmpo_openrlhf(fixtures, tmp_path / "plain", args, extra_env=CHECKOUT).check()
    hidden = run_gmpo_openrlhf(fixtures, tmp_path / "hidden", args, extra_env={**CHECKOUT, ENV: "1"}).check()
    zero3_env = {**CHECKOUT, ENV: "1"}
    zero3 = run_gmpo_openrlhf(fixtures, tmp_path / "zero3", [*args, "--ds.zero_stage", "3"], extra_env=zero3_env)
    zero3.check()
    before = initial_weights(fixtures["model"])
    reference = update(plain, before)
    assert sum(float(delta.abs().sum()) for delta in reference.values()) > 0
    for name, run in (("ZeRO-2", hidden), ("ZeRO-3", zero3)):
        difference = relative_difference(update(run, before), reference)
        print(f"{name}, hidden-state path vs logits path: {difference:.1e}")  # shown with pytest -s or -rP
        assert difference <= TOLERANCE, name
        assert {"PolicyModelActor", "ReferenceModelActor"} <= _announced_by(run.output), run.output[-4000:]
    assert not _announced_by(plain.output) and f"{ENV}=1" not in plain.output and not _head_calls(plain)
    for run in (hidden, zero3):
        calls = _head_calls(run)
        assert {call["actor_class"] for call in calls} == {"PolicyModelActor", "ReferenceModelActor"}
        assert {call["full_numel"] for call in calls} == {VOCAB * HIDDEN}
