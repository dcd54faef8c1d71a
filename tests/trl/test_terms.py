"""The inputs TRL has and the loss terms read, through ``RegistryGRPOTrainer``: the per-sample
rewards TRL computed (``topr``), the differentiable entropies of TRL's forward
(``GRPOConfig.entropy_coef``, ``top_entropy_quantile``), the fused-linear path's refusal of
the entropy terms, and the groups TRL formed (``real``, with its refusal of settings that cut a
group). Tiny random model, float32, one process."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from trl import GRPOTrainer

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.adapters.trl import RegistryGRPOTrainer, UnsupportedTRLOptionError

from .tiny import count_digits_reward, grpo_config, max_grad_difference, micro_batch, run_loss

TOL = 1e-6
LAYER_KERNELS_OFF = {"rope": False, "rms_norm": False, "swiglu": False, "cross_entropy": False}
LIGER_DEPRECATED = "ignore:`use_liger_kernel=True` is deprecated:FutureWarning"


class Recorded:
    """The trainer's registry loss, recording the ``LossInputs``, ``BatchInfo`` and keywords
    of each call (it delegates everything else to the spec)."""

    def __init__(self, spec):
        self.spec, self.calls = spec, []

    def __getattr__(self, name):
        return getattr(self.spec, name)

    def __call__(self, inputs, batch, **kwargs):
        self.calls.append((inputs, batch, kwargs))
        return self.spec(inputs, batch, **kwargs)


def _trainer(cls, model_dir, tmp_path, tokenizer, prompts, name, reward_funcs=count_digits_reward, **kwargs):
    config = {key: kwargs.pop(key) for key in list(kwargs) if key != "loss"}
    return cls(
        model_dir, reward_funcs, grpo_config(tmp_path / name, **config), prompts, processing_class=tokenizer, **kwargs
    )


def _record(trainer) -> Recorded:
    trainer.loss_spec = Recorded(trainer.loss_spec)
    return trainer.loss_spec


def _grad_to_log_probs(trainer, inputs) -> tuple[torch.Tensor, torch.Tensor, LossInputs, BatchInfo, dict]:
    """(loss, dloss/dlog_probs, the recorded inputs, batch info, keywords) of one ``_compute_loss``."""
    record = _record(trainer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer._compute_loss(trainer.model, inputs)
    captured, batch, kwargs = record.calls[-1]
    (grad,) = torch.autograd.grad(loss, captured.log_probs)
    return loss.detach(), grad, captured, batch, kwargs


def test_topr_reads_the_rewards_trl_computed(model_dir, tmp_path, tokenizer, prompts):
    """Two reward functions with TRL's reward_weights [1, 0.5]: the batch TRL hands to the loss
        carries sum_k w_k r_k per completion (from the texts the functions saw), the advantages TRL
        derived from the same rewards, and topr's loss and dL/dlog_probs through the trainer equal
        the core's on those rewards (and differ from the core's with the rewards' signs flipped; the
    old log-probs are moved off the current ones so that the ratio, and so topr's two sides, differ)."""
    seen: list[list[str]] = []

    def digits(completions, **kwargs):
        seen.append(list(completions))
        return [float(sum(ch.isdigit() for ch in text)) for text in completions]

    def length(completions, **kwargs):
        return [len(text) - 3.0 for text in completions]

    trainer = _trainer(
        RegistryGRPOTrainer,
        model_dir,
        tmp_path,
        tokenizer,
        prompts,
        "topr",
        reward_funcs=[digits, length],
        reward_weights=[1.0, 0.5],
        loss="topr",
    )
    trainer.model.train()
    rows = [{"prompt": prompt} for prompt in ("1 + 1 =", "1 + 1 =", "count to 4", "count to 4")]
    batch = trainer._generate_and_score_completions(rows)
    texts = seen[-1]
    expected = torch.tensor([sum(ch.isdigit() for ch in t) + 0.5 * (len(t) - 3.0) for t in texts])
    torch.testing.assert_close(batch["rewards"], expected, rtol=0, atol=1e-6)
    groups = expected.view(-1, 2)
    advantages = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(batch["advantages"], advantages.flatten(), rtol=1e-5, atol=1e-5)
    assert (expected > 0).any() and (expected <= 0).any()  # both of topr's sides

    noise = torch.randn(batch["old_per_token_logps"].shape, generator=torch.Generator().manual_seed(0))
    batch["old_per_token_logps"] = batch["old_per_token_logps"] + 0.5 * noise  # ratios != 1: topr's sides differ
    loss, grad, captured, info, kwargs = _grad_to_log_probs(trainer, batch)
    assert captured.rewards is batch["rewards"] and captured.entropy is None  # no term reads the entropy
    leaf = captured.log_probs.detach().requires_grad_(True)
    core_inputs = LossInputs(
        leaf, batch["old_per_token_logps"], batch["advantages"], batch["completion_mask"], rewards=expected
    )
    out = get_loss("topr")(core_inputs, info, **kwargs)
    (core_grad,) = torch.autograd.grad(out.loss, leaf)
    assert abs(loss.item() - out.loss.item()) <= TOL
    torch.testing.assert_close(grad, core_grad, rtol=0, atol=TOL)
    flipped = get_loss("topr")(dataclasses.replace(core_inputs, rewards=-expected), info, **kwargs)
    (flipped_grad,) = torch.autograd.grad(flipped.loss, leaf)
    assert (flipped_grad - grad).abs().max() > 1e-3


def with_env(env: dict[str, str], build):
    """``build()`` with ``env`` set (the trainer reads it in ``__init__``)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        return build()


@pytest.fixture(scope="module")
def term_trainers(model_dir, tmp_path_factory):
    """(ours, TRL's GRPOTrainer) dapo pairs with the entropy bonus, with the top-entropy mask,
    and ours without either; all from the same weights."""
    from datasets import Dataset

    from .tiny import PROMPTS, build_tokenizer

    out, tokenizer, prompts = (
        tmp_path_factory.mktemp("terms"),
        build_tokenizer(),
        Dataset.from_dict({"prompt": PROMPTS}),
    )

    def build(cls, name, **config):
        extra = {"loss": "dapo"} if cls is RegistryGRPOTrainer else {}
        return _trainer(cls, model_dir, out, tokenizer, prompts, name, **extra, **config)

    return {
        "plain": build(RegistryGRPOTrainer, "plain"),
        "bonus": (
            build(RegistryGRPOTrainer, "bonus", entropy_coef=0.05),
            build(GRPOTrainer, "bonus-trl", entropy_coef=0.05),
        ),
        "bonus-hparams": with_env(
            {"GMPO_PLUGINS_LOSS_HPARAMS": '{"entropy_coef": 0.05}'}, lambda: build(RegistryGRPOTrainer, "bonus-hparams")
        ),
        "mask": (
            build(RegistryGRPOTrainer, "mask", top_entropy_quantile=0.5),
            build(GRPOTrainer, "mask-trl", top_entropy_quantile=0.5),
        ),
    }


def test_entropy_coef_adds_exactly_the_core_term(term_trainers):
    """GRPOConfig.entropy_coef = c reaches the registry's bonus with TRL's differentiable
    entropies H: the loss and every parameter gradient change by exactly those of
    -c * sum_t m_t H_t / sum_t m_t (dapo's token-mean over the micro-batch, one process, no
    accumulation), and equal TRL's own GRPOTrainer with the same entropy_coef (where TRL's
    micro-batch mean and the loss's token-mean coincide)."""
    ours, theirs = term_trainers["bonus"]
    plain = term_trainers["plain"]
    inputs = micro_batch(ours, seed=3, spread=0.3)
    record = _record(ours)
    with_bonus = run_loss(ours, inputs)
    captured = record.calls[-1][0]
    assert captured.entropy is not None and captured.entropy.requires_grad  # TRL's, with its gradient
    without = run_loss(plain, inputs)

    plain.model.zero_grad(set_to_none=True)
    mask = inputs["completion_mask"].float()
    prompt_and_completion = (
        torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
    )
    # H from the model's logits (TRL's: of logits / temperature at the completion's positions)
    logits = plain.model(input_ids=prompt_and_completion[0], attention_mask=prompt_and_completion[1]).logits
    logits = logits[:, -mask.size(1) - 1 : -1] / plain.temperature
    entropies = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    term = -0.05 * (entropies * mask).sum() / mask.sum()
    term.backward()
    term_grads = {name: p.grad for name, p in plain.model.named_parameters() if p.grad is not None}
    assert abs((with_bonus[0] - without[0]).item() - term.item()) <= TOL
    difference = {name: with_bonus[1][name] - without[1][name] for name in without[1]}
    assert max_grad_difference(difference, {name: term_grads[name] for name in difference}) <= TOL
    assert max(g.abs().max().item() for g in term_grads.values()) > 1e-4  # the term moves the parameters

    trl = run_loss(theirs, inputs)
    assert abs(with_bonus[0].item() - trl[0].item()) <= TOL
    assert max_grad_difference(with_bonus[1], trl[1]) <= TOL


def test_entropy_coef_given_to_the_registry_alone_trains_as_through_grpo_config(term_trainers):
    """The registry's entropy_coef = 0.05 given through GMPO_PLUGINS_LOSS_HPARAMS with
    GRPOConfig.entropy_coef left at 0: the same loss and
    every parameter gradient as GRPOConfig.entropy_coef = 0.05 (TRL 1.14 returns its entropies
    without a gradient unless its own bonus is on; the adapter asks for it)."""
    through_config, _ = term_trainers["bonus"]
    alone = term_trainers["bonus-hparams"]
    assert alone.args.entropy_coef == 0.0 and alone.loss_hparams["entropy_coef"] == 0.05
    inputs = micro_batch(through_config, seed=3, spread=0.3)
    expected, got, plain = (run_loss(t, inputs) for t in (through_config, alone, term_trainers["plain"]))
    assert abs(got[0].item() - expected[0].item()) <= TOL
    assert max_grad_difference(got[1], expected[1]) <= TOL
    assert max_grad_difference(got[1], plain[1]) > 1e-4  # the bonus moved the gradient


def test_top_entropy_quantile_is_trls_mask_applied_once(term_trainers):
    """GRPOConfig.top_entropy_quantile = 0.5: the registry's mask on the entropies the trainer
    passed is TRL's own ``get_high_entropy_mask`` of them; the trainer's loss and dL/dlog_probs
    equal the core's dapo with that mask as zero weights and no term; and the whole step equals
    TRL's GRPOTrainer with the same option (TRL's own masking does not act a second time)."""
    ours, theirs = term_trainers["mask"]
    inputs = micro_batch(ours, seed=4, spread=0.3)
    loss, grad, captured, info, kwargs = _grad_to_log_probs(ours, inputs)
    assert kwargs["top_entropy_quantile"] == 0.5 and captured.entropy is not None
    mask = captured.mask
    trl_mask = ours.get_high_entropy_mask(captured.entropy.detach(), mask, 0.5)
    assert 0 < int(trl_mask.sum()) < int(mask.sum())  # it removes some valid tokens, not all
    leaf = captured.log_probs.detach().requires_grad_(True)
    weighted = dataclasses.replace(captured, log_probs=leaf, entropy=None, rollout_is_weights=trl_mask.float())
    core_kwargs = {key: value for key, value in kwargs.items() if key != "top_entropy_quantile"}
    out = get_loss("dapo")(weighted, info, **core_kwargs)
    (core_grad,) = torch.autograd.grad(out.loss, leaf)
    assert abs(loss.item() - out.loss.item()) <= TOL
    torch.testing.assert_close(grad, core_grad, rtol=0, atol=TOL)
    assert (core_grad[mask.bool() & ~trl_mask] == 0).all()

    ours.loss_spec = ours.loss_spec.spec
    step_ours, step_theirs = run_loss(ours, inputs), run_loss(theirs, inputs)
    assert abs(step_ours[0].item() - step_theirs[0].item()) <= TOL
    assert max_grad_difference(step_ours[1], step_theirs[1]) <= TOL


@pytest.mark.filterwarnings(LIGER_DEPRECATED)
@pytest.mark.parametrize(
    ("config", "option"),
    [({"top_entropy_quantile": 0.5}, "top_entropy_quantile=0.5"), ({"entropy_coef": 0.01}, "entropy_coef=0.01")],
)
def test_the_fused_linear_path_refuses_the_entropy_terms_by_name(tmp_path, config, option):
    """The fused-linear path computes the entropy without gradient: refused at construction,
    before the model loads, naming the option and the switch."""
    args = grpo_config(tmp_path, use_liger_kernel=True, liger_kernel_config=dict(LAYER_KERNELS_OFF), **config)
    message = rf"^gmpo_plugins: gmpo with {option} needs per-token entropy, which TRL's fused-linear path "
    with pytest.raises(UnsupportedTRLOptionError, match=message) as info:
        RegistryGRPOTrainer("/nonexistent/model", count_digits_reward, args, loss="gmpo")
    assert str(info.value).endswith("set use_liger_kernel=False")


def _real_trainer(model_dir, tmp_path, tokenizer, prompts):
    """loss="real" on grpo_config's defaults: 4 rows per process, num_generations=2, one micro-batch
    per generation (steps_per_generation=1): every micro-batch holds whole groups."""
    return _trainer(RegistryGRPOTrainer, model_dir, tmp_path, tokenizer, prompts, "real", loss="real")


def _generated(trainer) -> dict:
    trainer.model.train()
    rows = [{"prompt": prompt} for prompt in ("1 + 1 =", "1 + 1 =", "count to 4", "count to 4")]
    batch = trainer._generate_and_score_completions(rows)
    noise = torch.randn(batch["old_per_token_logps"].shape, generator=torch.Generator().manual_seed(0))
    batch["old_per_token_logps"] = batch["old_per_token_logps"] + 0.5 * noise  # scores != 0: real's sides differ
    return batch


def test_real_reads_the_groups_trl_formed(model_dir, tmp_path, tokenizer, prompts):
    """The batch carries each row's group as TRL formed it for its advantages (rows 0-1 and 2-3,
    whose advantages TRL centred per group), and real's loss and dL/dlog_probs through the trainer
    equal the core's with those groups (and differ from the core's with all rows in one group)."""
    trainer = _real_trainer(model_dir, tmp_path, tokenizer, prompts)
    batch = _generated(trainer)
    assert batch["group_ids"].tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(batch["advantages"].view(2, 2).sum(1), torch.zeros(2), rtol=0, atol=1e-5)
    loss, grad, captured, info, kwargs = _grad_to_log_probs(trainer, batch)
    assert captured.group_ids is batch["group_ids"] and captured.rewards is None and captured.entropy is None
    leaf = captured.log_probs.detach().requires_grad_(True)
    core_inputs = LossInputs(
        leaf, batch["old_per_token_logps"], batch["advantages"], batch["completion_mask"], group_ids=batch["group_ids"]
    )
    out = get_loss("real")(core_inputs, info, **kwargs)
    (core_grad,) = torch.autograd.grad(out.loss, leaf)
    assert abs(loss.item() - out.loss.item()) <= TOL and loss.item() != 0.0
    torch.testing.assert_close(grad, core_grad, rtol=0, atol=TOL)
    one_group = get_loss("real")(dataclasses.replace(core_inputs, group_ids=torch.zeros(4, dtype=torch.long)), info)
    assert abs(one_group.loss.item() - out.loss.item()) > 1e-3


def test_real_refuses_the_settings_that_cut_groups_before_the_model_loads(tmp_path):
    """steps_per_generation=2 (TRL shuffles the rows of a generation over its micro-batches) and
    2 rows per process with groups of 4: refused at construction, each setting named."""
    args = grpo_config(tmp_path, per_device_train_batch_size=2, num_generations=4, gradient_accumulation_steps=2)
    assert args.steps_per_generation == 2
    with pytest.raises(UnsupportedTRLOptionError) as info:
        RegistryGRPOTrainer("/nonexistent/model", count_digits_reward, args, loss="real")
    message = str(info.value)
    assert "steps_per_generation=2: loss 'real' compares the completions of a prompt with each other" in message
    assert "set steps_per_generation=1" in message
    assert "per_device_train_batch_size=2" in message and "num_generations=4" in message


def test_real_refuses_a_micro_batch_with_part_of_a_group(model_dir, tmp_path, tokenizer, prompts):
    """A micro-batch that holds 1 of a group's 2 completions (as an evaluation batch of an odd
    size would): the loss call raises naming the batch-size setting, instead of a silently
    different loss."""
    trainer = _real_trainer(model_dir, tmp_path, tokenizer, prompts)
    batch = _generated(trainer)
    cut = {
        key: value[:3] if torch.is_tensor(value) and value.dim() and value.size(0) == 4 else value
        for key, value in batch.items()
    }
    with pytest.raises(
        UnsupportedTRLOptionError,
        match=r"holds 1 of a group's 2 completions: set "
        r"per_device_train_batch_size to a multiple of num_generations=2",
    ):
        _grad_to_log_probs(trainer, cut)
