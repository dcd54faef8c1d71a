"""``use_liger_kernel=True``: RegistryGRPOTrainer computes its registry loss on the
fused-linear path (hidden states and lm_head, no logits tensor), and one real
``trainer.train()`` step moves every parameter exactly as the unfused trainer's step does.

Liger's layer kernels (RoPE, RMSNorm, SwiGLU) are Triton programs that need a GPU; here
``liger_kernel_config`` switches them off, so the two trainers run the same model code and
only the loss path differs."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

from .tiny import count_digits_reward, grpo_config

pytest.importorskip("liger_kernel")

# Liger's layer kernels off on CPU; its fused linear cross-entropy forward too, as TRL 1.15+ forces it
# (TRL 1.14 leaves it on, and its forward then fails in generation with transformers 5)
LAYER_KERNELS_OFF = {
    "rope": False,
    "rms_norm": False,
    "swiglu": False,
    "cross_entropy": False,
    "fused_linear_cross_entropy": False,
}
# transformers' Trainer applies Liger through a deprecated switch: TRL warns that it is deprecated
LIGER_DEPRECATED = "ignore:`use_liger_kernel=True` is deprecated:FutureWarning"


def one_step(model_dir, tmp_path, tokenizer, prompts, loss: str, liger: bool, **config) -> dict:
    extra = {"use_liger_kernel": True, "liger_kernel_config": dict(LAYER_KERNELS_OFF)} if liger else {}
    trainer = RegistryGRPOTrainer(
        model_dir,
        count_digits_reward,
        grpo_config(tmp_path / f"{loss}-{liger}", max_steps=1, optim="sgd", **config, **extra),
        prompts,
        processing_class=tokenizer,
        loss=loss,
    )
    if liger:
        calls = []
        original = trainer._fused_linear_loss
        trainer._fused_linear_loss = lambda *a, **k: calls.append(1) or original(*a, **k)
    trainer.train()
    if liger:
        assert calls  # the fused-linear path ran
    entry = next(e for e in trainer.state.log_history if "loss" in e)
    return {"params": {n: p.detach().clone() for n, p in trainer.model.named_parameters()}, "log": entry}


@pytest.mark.filterwarnings(LIGER_DEPRECATED)
@pytest.mark.parametrize(
    ("loss", "config", "logged"),
    [
        (
            "gmpo",
            {"epsilon": 0.4, "beta": 0.04, "use_bias_correction_kl": False, "gradient_accumulation_steps": 2},
            ("clip_ratio/region_mean", "seq_weight_mean"),
        ),
        ("dapo", {"epsilon": 0.2, "epsilon_high": 0.28, "temperature": 0.8}, ("clip_ratio/region_mean",)),
        ("real", {}, ()),  # reads the groups TRL formed (LossInputs.group_ids) on both paths
    ],
)
def test_liger_switch_step_equals_unfused_step(loss, config, logged, model_dir, tmp_path, tokenizer, prompts):
    """float32: the two paths sum the lm_head products in other orders (~1e-7 relative per
    logit, ~1e-6 on a gradient entry); one SGD step at lr 1e-2 (the parameter moves by
    lr * grad, so a gradient difference shows undamped, unlike Adam's sign-like step which
    amplifies it on near-zero entries) leaves the parameters within 1e-7 of each other."""
    fused = one_step(model_dir, tmp_path, tokenizer, prompts, loss, True, **config)
    unfused = one_step(model_dir, tmp_path, tokenizer, prompts, loss, False, **config)
    for name, value in unfused["params"].items():
        torch.testing.assert_close(fused["params"][name], value, rtol=1e-6, atol=1e-7, msg=name)
    assert unfused["log"]["grad_norm"] > 1e-3  # the step moved the parameters
    for key in ("loss", "policy_loss", "entropy", *logged):
        assert fused["log"][key] == pytest.approx(unfused["log"][key], rel=1e-4, abs=1e-6), key


@pytest.mark.filterwarnings(LIGER_DEPRECATED)
def test_liger_switch_with_moe_router_loss_is_refused(moe_model_dir, tmp_path, tokenizer, prompts):
    """The fused-linear path has no router logits: refused, naming the option, not dropped."""
    from gmpo_plugins.adapters.trl.options import UnsupportedTRLOptionError

    config = grpo_config(tmp_path, use_liger_kernel=True, liger_kernel_config=dict(LAYER_KERNELS_OFF))
    with pytest.raises(UnsupportedTRLOptionError, match="use_liger_kernel=True with a MoE router auxiliary loss"):
        RegistryGRPOTrainer(moe_model_dir, count_digits_reward, config, prompts, processing_class=tokenizer)
