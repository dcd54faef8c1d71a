"""dapo through all four trainers, its own features acting: dapo with its registry defaults
(ratio clip [1 - 0.2, 1 + 0.28], token-mean over the mini-batch, no dual clip) on the example
aligned for SkyRL (``examples/frameworks/tiny_adam.toml`` without its gmpo ``[loss_hparams]``:
AdamW eps 1e-8, one RL step of two optimiser steps, compared after each), on 8 responses (4
prompts, every row of its dataset, one mini-batch, one forward/backward pass), through verl's v1
trainer (PPOTrainerSync), OpenRLHF's train_ppo_ray, TRL's GRPOTrainer and SkyRL's RayPPOTrainer, each in its
own virtualenv on the CPU stand-ins. Every pair of the four is compared with the sign-like
comparison of ``gmpo_plugins.frameworks.first_update``.

The bounds and the reduction reach each trainer in its own setting: verl's
``actor.clip_ratio_low/high`` and ``actor.loss_agg_mode=token-mean``, OpenRLHF's
``--actor.eps_clip_low_high`` and ``--actor.loss_agg_mode token-mean``, SkyRL's
``algorithm.eps_clip_low/high`` and ``algorithm.loss_reduction=token_mean``, TRL's ``epsilon`` and
``epsilon_high`` (its ``loss_type`` stays at its default, which the registry loss replaces: the
loss's own token-mean over the tokens of the optimiser step, ``adapters.trl.normalisation``).
Each adapter's provenance line in the trainer's log names what the loss was called with.

What the numbers show is recomputed here from the rollout every stand-in draws (the seeded
sampler of ``examples/seeded_generation.py``, the example's reward, group-mean advantages) and the
parameters each trainer saved after its first optimiser step:

- token-mean: one response of the 8 ends after 2 tokens (58 tokens in all), so a token mean
  weighs its tokens 4 times as much, relative to the others, as a mean of the sequences' token
  means does. AdamW's first step (``lr * g / (|g| + eps)``) computed here from the on-policy
  gradient of each reduction is, under the sign-like comparison, each trainer's own first step
  for the token mean and far from it for the per-sequence mean.
- the asymmetric clip: in the second optimiser step the log-probs of each trainer's first-step
  parameters against the initial ones give every token's ratio; tokens of positive advantage
  lie between 1.2 and 1.28, which a symmetric 0.2 clip would cut and dapo's does not, and every
  trainer's ``clip_frac_high`` counts only those above 1.28 (``clip_frac_low`` those of negative
  advantage below 0.8, ``log_ratio_max`` beyond ln 1.28). The logged ``policy_loss`` is the token
  mean of dapo's clipped surrogate over the two optimiser steps.

Run by ``nox -s frameworks_e2e_four`` with ``GMPO_PLUGINS_PYTHON_{VERL,OPENRLHF,TRL,SKYRL}`` naming the
virtualenvs (SkyRL's processes need ``tests/skyrl/shims`` on PYTHONPATH, set here).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from gmpo_plugins.cli import main
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.first_update import (
    SIGN_LIKE,
    gradient_well_above_eps,
    initial_parameters,
    load_parameters,
    relative_difference,
    tolerance,
)
from gmpo_plugins.frameworks.spec import load_spec, parse_override
from tests.example_runs import (
    EXAMPLES,
    _module,
    adam_example_in,
    assert_every_pair_identical_sign_like,
    step_one_records,
)

FRAMEWORKS = ("verl", "openrlhf", "trl", "skyrl")
PROMPTS = 4
ROLLOUTS_PER_PROMPT = 2
DAPO = (
    'loss="dapo"',
    f"prompts_per_step={PROMPTS}",
    "mini_batch_size=8",
    "micro_batch_size=8",
    'dataset="four_prompts.jsonl"',
)
# the launches' own settings of dapo's bounds and reduction
SETTINGS = {
    "verl": (
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    ),
    "openrlhf": ("--actor.eps_clip_low_high 0.2 0.28", "--actor.loss_agg_mode token-mean"),
    "skyrl": (
        "trainer.algorithm.eps_clip_low=0.2",
        "trainer.algorithm.eps_clip_high=0.28",
        "trainer.algorithm.loss_reduction=token_mean",
    ),
}
# what each adapter's provenance line says the loss was called with
CALLED_WITH = ("-> dapo: eps_low=0.2 (", "eps_high=0.28 (", "dual_clip=None (", "reduction='token-mean' (")


@dataclass(frozen=True)
class Response:
    """One response of the first rollout: its prompt's and its own token ids, its group-mean advantage."""

    prompt_ids: list[int]
    token_ids: list[int]
    reward: float
    advantage: float


def first_rollout(folder: Path, prompts: int) -> list[Response]:
    """The first rollout every CPU stand-in draws: the first ``prompts`` prompts, the seeded samples
    of the initial model, the example's reward, advantages r - group mean (advantage_std_norm false)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    generation = _module("seeded_generation", EXAMPLES / "seeded_generation.py")
    model = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    reward = _module("example_reward", folder / "reward.py")
    rows = [json.loads(line) for line in (folder / "prompts.jsonl").read_text().splitlines()[:prompts]]
    responses = []
    for row in rows:
        messages = [{"role": "user", "content": row["prompt"]}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        prompt_ids = list(ids["input_ids"])
        group = []
        for index in range(ROLLOUTS_PER_PROMPT):
            sample = generation.seeded_sample(model, prompt_ids, index, 8)
            text = tokenizer.decode(sample.token_ids, skip_special_tokens=True)
            group.append((sample.token_ids, reward.reward(text, row["answer"])))
        mean = sum(score for _, score in group) / len(group)
        responses += [Response(prompt_ids, tokens, score, score - mean) for tokens, score in group]
    return responses


def token_log_probs(model: torch.nn.Module, responses: list[Response]) -> list[torch.Tensor]:
    """log pi(token) of every response token under ``model`` (float32), one tensor per response."""
    found = []
    for response in responses:
        ids = torch.tensor([response.prompt_ids + response.token_ids])
        logits = model(ids).logits[0, len(response.prompt_ids) - 1 : -1].float()
        found.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(response.token_ids)[:, None])[:, 0])
    return found


def first_adam_step(
    model: torch.nn.Module,
    initial: dict[str, torch.Tensor],
    responses: list[Response],
    weights: list[torch.Tensor],
    learning_rate: float,
    eps: float,
) -> dict[str, torch.Tensor]:
    """AdamW's first step (no weight decay) on the on-policy gradient of the clipped surrogate
    reduced with the per-token ``weights``: at ratio 1 no clip acts and its gradient is that of
    -sum_t w_t A_t log pi(t); bias-corrected, the step is lr * g / (|g| + eps)."""
    model.load_state_dict(initial)
    model.zero_grad()
    log_probs = token_log_probs(model, responses)
    loss = sum((-r.advantage * lp * w).sum() for r, lp, w in zip(responses, log_probs, weights, strict=True))
    loss.backward()
    return {
        name: (initial[name] - learning_rate * p.grad / (p.grad.abs() + eps)).detach()
        for name, p in model.named_parameters()
    }


def sign_like_difference(initial, first, second, learning_rate: float) -> float:
    """``rel2`` of the sign-like comparison between two parameter sets after one AdamW step."""
    coordinates = gradient_well_above_eps(initial, first, second, learning_rate)
    return relative_difference(initial, first, second, 2.0, coordinates)


def provenance(log: str) -> list[str]:
    """The adapter's lines naming what dapo was called with."""
    return [line for line in log.splitlines() if "-> dapo: " in line]


def trl_config(script: str) -> dict:
    """The GRPOConfig keywords TRL's launch script passes (its CONFIG constant)."""
    (config,) = [
        ast.literal_eval(node.value)
        for node in ast.parse(script).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "CONFIG"
    ]
    return config


def test_dapo_with_its_clip_higher_and_token_mean_acting_takes_the_same_first_rl_step_in_the_four_trainers(
    tmp_path, monkeypatch
):
    spec = adam_example_in(tmp_path, monkeypatch)
    head, table, _ = spec.read_text().partition("[loss_hparams]")  # gmpo's log-space band: dapo's own defaults
    assert table
    spec.write_text(head)
    rows = (tmp_path / "prompts.jsonl").read_text().splitlines()[:PROMPTS]
    (tmp_path / "four_prompts.jsonl").write_text("".join(row + "\n" for row in rows))  # every row in the first batch
    run_spec = load_spec(spec, dict(parse_override(value) for value in DAPO))
    hparams = run_spec.resolved_hparams()
    assert hparams == get_loss("dapo").defaults
    assert (hparams["eps_low"], hparams["eps_high"], hparams["reduction"]) == (0.2, 0.28, "token-mean")
    assert hparams["dual_clip"] is None
    eps_low, eps_high = hparams["eps_low"], hparams["eps_high"]

    out = tmp_path / "run"
    sets = [arg for value in DAPO for arg in ("--set", value)]
    status = main(["frameworks", str(spec), *sets, "--frameworks", ",".join(FRAMEWORKS), "--out", str(out)])
    report = (out / "report.md").read_text()
    assert status == 0, report
    records = json.loads((out / "records.json").read_text())
    assert all(run["complete"] and run["standins"] for run in records["runs"].values())

    # the bounds and the reduction in each framework's own settings, and the loss called with them
    for name, settings in SETTINGS.items():
        launch = (out / name / "launch.sh").read_text()
        assert all(setting in launch for setting in settings), name
    config = trl_config((out / "trl" / "train_trl.py").read_text())
    assert (config["epsilon"], config["epsilon_high"]) == (0.2, 0.28)
    assert "loss_type" not in config  # TRL's default: the registry loss's own token-mean replaces it
    for name in FRAMEWORKS:
        lines = provenance((out / name / "output.log").read_text())
        assert lines and all(all(text in line for text in CALLED_WITH) for line in lines), name

    # the first rollout, recomputed: one response is short, so the two reductions weigh tokens apart
    responses = first_rollout(tmp_path, PROMPTS)
    lengths = [len(r.token_ids) for r in responses]
    assert min(lengths) < max(lengths)  # measured: [8, 8, 8, 8, 8, 2, 8, 8]
    assert any(r.advantage != 0 for r in responses if len(r.token_ids) == min(lengths))
    tokens = sum(lengths)
    reward = sum(r.reward for r in responses) / len(responses)
    assert_every_pair_identical_sign_like(records, FRAMEWORKS, reward)

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model", dtype=torch.float32)
    initial = initial_parameters(tmp_path / "model")
    token_mean = [torch.full((length,), 1.0 / tokens) for length in lengths]
    sequence_mean = [torch.full((length,), 1.0 / (len(lengths) * length)) for length in lengths]
    lr, eps = run_spec.learning_rate, run_spec.adam_eps
    by_token = first_adam_step(model, initial, responses, token_mean, lr, eps)
    by_sequence = first_adam_step(model, initial, responses, sequence_mean, lr, eps)
    first_steps = {name: load_parameters(out / name / "optimiser_steps" / "step_1.pt") for name in FRAMEWORKS}
    for name, first in first_steps.items():
        # measured: 3.0e-8 to 3.3e-8 for the token mean, 0.70 for the per-sequence mean
        assert sign_like_difference(initial, first, by_token, lr) <= tolerance("float32", 1, SIGN_LIKE), name
        assert sign_like_difference(initial, first, by_sequence, lr) > 0.1, name

    # the second optimiser step's ratios, from each trainer's own first-step parameters
    advantages = torch.cat([torch.full((len(r.token_ids),), r.advantage) for r in responses])
    model.load_state_dict(initial)
    with torch.no_grad():
        old = torch.cat(token_log_probs(model, responses))
    step_one = step_one_records(records, FRAMEWORKS)
    for name, first in first_steps.items():
        model.load_state_dict(first)
        with torch.no_grad():
            log_ratio = torch.cat(token_log_probs(model, responses)) - old
        ratio = log_ratio.exp()
        positive, negative = advantages > 0, advantages < 0
        above = int((positive & (ratio > 1 + eps_high)).sum())  # measured: 11
        between = int((positive & (ratio > 1 + eps_low) & (ratio <= 1 + eps_high)).sum())  # measured: 8
        below = int((negative & (ratio < 1 - eps_low)).sum())  # measured: 10
        assert above > 0 and between > 0 and below > 0, name
        # the RL step's record: its two optimiser steps over the same tokens, nothing clipped in the
        # first (on-policy); a token mean of dapo's clipped surrogate in each
        surrogate = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - eps_low, 1 + eps_high))
        expected = {
            "clip_frac_high": above / (2 * tokens),  # 0.09483; with 1.2 as the bound: 0.1638
            "clip_frac_low": below / (2 * tokens),  # 0.08621
            "log_ratio_max": float(log_ratio.max()),  # 0.6023, beyond ln 1.28 = 0.2469
            "log_ratio_min": float(log_ratio.min()),  # -0.7578, beyond ln 0.8 = -0.2231
            "policy_loss": float((-advantages).sum() + surrogate.sum()) / (2 * tokens),  # -0.04900
        }
        assert expected["log_ratio_max"] > math.log(1 + eps_high) and expected["log_ratio_min"] < math.log(1 - eps_low)
        for metric, value in expected.items():
            assert step_one[name].get(metric) == pytest.approx(value, rel=1e-4, abs=1e-6), (name, metric)
