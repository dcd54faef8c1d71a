"""Registry losses through verl's own actor loss call site (``ppo_loss``) with a tiny random
Qwen2: equal to the core, invariant to micro-batching and data parallelism, and our
``grpo`` equal to verl's own ``vanilla`` (two implementations of the same math)."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss, list_losses

from . import engine
from .conftest import FIGURES

TOL = 1e-6
GMPO_FIELDS = {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4, "loss_agg_mode": "seq-mean-token-mean"}


def _core_step(model, rollout, name, **hparams):
    """The core loss on the whole mini-batch, log-probs computed without verl."""
    model.zero_grad(set_to_none=True)
    td = rollout.td
    mask = td["response_mask"].bool()
    inputs = LossInputs(rollout.log_probs(model), td["old_log_probs"], td["advantages"], mask)
    batch = BatchInfo(dp_size=1, global_batch_size=len(td), global_num_tokens=int(mask.sum()))
    out = get_loss(name)(inputs, batch, **hparams)
    out.loss.backward()
    return out, engine.flat_grad(model)


def _metric(step: engine.StepResult, key: str) -> float:
    return step.metrics[0][key].values[0]


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


CASES = [
    ("gmpo", "gmpo", GMPO_FIELDS, {"eps_low": 0.4, "eps_high": 0.4}),
    ("gmpo_seqclip", "gmpo_seqclip", GMPO_FIELDS, {"eps_low": 0.4, "eps_high": 0.4}),
    ("gmpo_noclip", "gmpo_noclip", {"loss_agg_mode": "seq-mean-token-mean"}, {}),
    (
        "gmpo_plugins.gspo",
        "gspo",
        {"clip_ratio_low": 0.05, "clip_ratio_high": 0.08, "loss_agg_mode": "seq-mean-token-mean"},
        {"eps_low": 0.05, "eps_high": 0.08},
    ),
    (
        "dapo",
        "dapo",
        {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 1.5},
        {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 1.5, "reduction": "token-mean"},
    ),
]
if any(spec.name == "example_reinforce" for spec in list_losses()):  # installed by the nox session
    CASES.append(("example_reinforce", "example_reinforce", {}, {}))


@pytest.mark.parametrize(("loss_mode", "name", "fields", "hparams"), CASES, ids=[c[0] for c in CASES])
def test_loss_and_gradient_equal_the_core(model, rollout, actor_config, loss_mode, name, fields, hparams):
    """ppo_loss(loss_mode) on one micro-batch == the core loss with the translated
    hyper-parameters: loss, every parameter gradient, and the metrics under verl's names."""
    step = engine.train_step(model, actor_config(loss_mode, **fields), engine.engine_batch(rollout.td), 1)
    out, grad = _core_step(model, rollout, name, **hparams)

    assert abs(step.loss - out.loss.item()) <= TOL
    assert grad.abs().max().item() > 1e-3  # a real gradient
    assert _max_diff(step.grad, grad) <= TOL
    assert _metric(step, "actor/pg_loss") == pytest.approx(out.metrics["policy_loss"].item(), abs=TOL)
    for key, value in out.metrics.items():
        if key != "policy_loss":
            assert _metric(step, f"actor/gmpo/{key}") == pytest.approx(value.item(), abs=TOL), key
    if "clip_frac" in out.metrics:
        assert _metric(step, "actor/pg_clipfrac") == pytest.approx(out.metrics["clip_frac"].item(), abs=TOL)
        assert _metric(step, "actor/ppo_kl") == pytest.approx(out.metrics["ppo_kl"].item(), abs=TOL)
    dual = out.metrics.get("clip_frac_dual", torch.tensor(0.0)).item()
    assert _metric(step, "actor/pg_clipfrac_lower") == pytest.approx(dual, abs=TOL)


def test_gmpo_clips_tokens_in_this_data(model, rollout, actor_config):
    """The equality above is not vacuous: both clip sides are active for gmpo at eps 0.4."""
    step = engine.train_step(model, actor_config("gmpo", **GMPO_FIELDS), engine.engine_batch(rollout.td), 1)
    assert _metric(step, "actor/gmpo/clip_frac_low") > 0
    assert _metric(step, "actor/gmpo/clip_frac_high") > 0


def _split_figure(label, steps):
    base = steps[0]
    parts = [
        f"{n}mb loss={s.loss:+.6f} |g|/|g1|={s.grad.norm().item() / base.grad.norm().item():.4f} "
        f"max|g-g1|={_max_diff(s.grad, base.grad):.1e}"
        for n, s in zip((1, 2, 4), steps, strict=False)
    ]
    FIGURES.append(f"{label:<28} " + " | ".join(parts))


@pytest.mark.parametrize("layout", ["padded", "nested"])
def test_micro_batch_invariance_ours_and_geo_mean_measured(model, rollout, actor_config, layout):
    """gmpo: 1, 2 and 4 micro-batches with verl's global_batch_info give the same summed
    loss and accumulated gradient (nested: T differs between micro-batches). verl's built-in
    geo_mean is measured under the same splits and reported, not asserted."""
    config = actor_config("gmpo", **GMPO_FIELDS)
    ours = [engine.train_step(model, config, engine.engine_batch(rollout.td, layout), n) for n in (1, 2, 4)]
    for step in ours[1:]:
        assert step.loss == pytest.approx(ours[0].loss, abs=TOL)
        assert _max_diff(step.grad, ours[0].grad) <= TOL
    _split_figure(f"gmpo (ours, {layout})", ours)

    geo = actor_config("geo_mean", clip_ratio_low=0.4, clip_ratio_high=0.4)
    theirs = [engine.train_step(model, geo, engine.engine_batch(rollout.td, layout), n) for n in (1, 2, 4)]
    _split_figure(f"verl geo_mean ({layout})", theirs)
    if layout == "padded":
        FIGURES.append(
            f"{'gmpo vs geo_mean, 1mb':<28} |loss diff|={abs(ours[0].loss - theirs[0].loss):.1e} "
            f"max|g diff|={_max_diff(ours[0].grad, theirs[0].grad):.1e}"
        )


def test_data_parallel_ranks_give_the_whole_batch_gradient(model, rollout, actor_config):
    """Two simulated dp ranks (4 sequences each, dp_size=2, global counts of the whole
    mini-batch, 2 micro-batches each): the mean of the ranks' gradients (what FSDP all-reduces)
    equals the single-rank gradient."""
    config = actor_config("gmpo", **GMPO_FIELDS)
    whole = engine.train_step(model, config, engine.engine_batch(rollout.td), 1)
    tokens = int(rollout.td["response_mask"].sum())
    grads = []
    for rows in (slice(0, 4), slice(4, 8)):
        shard = engine.engine_batch(rollout.td[rows], dp_size=2, global_tokens=tokens, global_size=8)
        grads.append(engine.train_step(model, config, shard, 2).grad)
    assert _max_diff((grads[0] + grads[1]) / 2, whole.grad) <= TOL


AGG_CASES = [
    ({"loss_agg_mode": "token-mean"}, "padded", False),
    ({"loss_agg_mode": "seq-mean-token-mean", "clip_ratio_c": 1.5}, "padded", True),
    ({"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 16}, "padded", False),
    ({"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 1024}, "nested", True),
    ({"loss_agg_mode": "token-mean", "clip_ratio_high": 0.28, "clip_ratio_c": 1.5}, "nested", True),
]


@pytest.mark.parametrize(
    ("fields", "layout", "with_is_weights"),
    AGG_CASES,
    ids=[f"{c[0]['loss_agg_mode']}-{c[1]}{'-is' if c[2] else ''}" for c in AGG_CASES],
)
def test_grpo_equals_verl_vanilla(model, rollout, actor_config, fields, layout, with_is_weights):
    """Our grpo and verl's vanilla through the same ppo_loss, same data, 2 micro-batches:
    loss, gradient and verl's metrics agree to 1e-6 (dual clip = clip_ratio_c; rollout IS
    weights where marked; nested: T differs between micro-batches)."""
    padded = rollout.td.clone()
    if with_is_weights:
        g = torch.Generator().manual_seed(3)
        padded["rollout_is_weights"] = torch.rand(padded["response_mask"].shape, generator=g) * 2
    batch = engine.engine_batch(padded, layout)
    ours = engine.train_step(model, actor_config("grpo", **fields), batch, 2)
    vanilla = engine.train_step(model, actor_config("vanilla", **fields), batch, 2)
    assert "actor/gmpo/clip_frac" in ours.metrics[0] and "actor/gmpo/clip_frac" not in vanilla.metrics[0]
    assert abs(ours.loss - vanilla.loss) <= TOL
    assert _max_diff(ours.grad, vanilla.grad) <= TOL
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
        for mine, theirs in zip(ours.metrics, vanilla.metrics, strict=True):
            assert mine[key].values[0] == pytest.approx(theirs[key].values[0], abs=TOL), key
    if "clip_ratio_c" in fields:  # the dual clip is exercised
        assert max(m["actor/pg_clipfrac_lower"].values[0] for m in ours.metrics) > 0
    FIGURES.append(
        f"grpo vs vanilla {fields['loss_agg_mode']:<24} {layout:<6} is={with_is_weights!s:<5} "
        f"|loss diff|={abs(ours.loss - vanilla.loss):.1e} max|g diff|={_max_diff(ours.grad, vanilla.grad):.1e}"
    )


def test_null_loss_scale_factor_is_the_constant_not_the_padded_width(model, rollout, actor_config):
    """verl's seq-mean-token-sum-norm with loss_scale_factor null divides each micro-batch by
    its own padded width (nested layout: it differs between micro-batches, so the gradient
    depends on the split); ours keeps Dr.GRPO's constant (1024): 1 and 2 micro-batches agree
    and equal loss_scale_factor=1024."""
    batch = engine.engine_batch(rollout.td.clone(), "nested")
    null = actor_config("dr_grpo", loss_agg_mode="seq-mean-token-sum-norm")
    one, two = engine.train_step(model, null, batch, 1), engine.train_step(model, null, batch, 2)
    assert _max_diff(one.grad, two.grad) <= TOL
    explicit = engine.train_step(
        model, actor_config("dr_grpo", loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=1024), batch, 2
    )
    assert _max_diff(two.grad, explicit.grad) <= TOL
    vanilla = actor_config("vanilla", loss_agg_mode="seq-mean-token-sum-norm")
    v_one, v_two = engine.train_step(model, vanilla, batch, 1), engine.train_step(model, vanilla, batch, 2)
    FIGURES.append(
        f"seq-mean-token-sum-norm, loss_scale_factor null, nested, 1 vs 2 micro-batches: ours max|g diff|="
        f"{_max_diff(one.grad, two.grad):.1e}, verl vanilla max|g diff|={_max_diff(v_one.grad, v_two.grad):.1e}"
    )
