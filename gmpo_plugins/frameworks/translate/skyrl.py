"""The run spec as SkyRL 0.3 overrides, run by a script that registers the losses and the reward.

    spec                        SkyRL override
    model                       trainer.policy.model.path (the tokenizer is loaded from it: a
                                separate ``tokenizer`` is refused)
    dataset                     data.train_data / val_data = ['{out}/train.parquet'] (converted:
                                ``python -m gmpo_plugins.frameworks.datasets skyrl``)
    reward                      environment.env_class=gmpo_plugins_reward: a one-step skyrl_gym
                                environment registered by {out}/skyrl_main.py in SkyRL's training task
    loss, loss_hparams          trainer.algorithm.policy_loss_type=gmpo_plugins.<loss>; the adapter's
                                fields (``adapters.skyrl.options.FIELDS``): eps_clip_low/high,
                                loss_reduction, max_seq_len
    rollouts_per_prompt         generator.n_samples_per_prompt
    prompts_per_step            trainer.train_batch_size (prompts)
    mini_batch_size             trainer.policy_mini_batch_size = mini_batch_size / rollouts_per_prompt
    micro_batch_size            trainer.micro_train_batch_size_per_gpu
    epochs_per_batch            trainer.update_epochs_per_batch
    optimizer, learning_rate    AdamW only (SGD refused), trainer.policy.optimizer_config.lr,
                                adam_eps other than AdamW's 1e-8 refused (SkyRL sets none),
                                scheduler constant_with_warmup with 0 warm-up steps
    weight_decay, max_grad_norm optimizer_config.weight_decay, max_grad_norm
    max_prompt_length           trainer.max_prompt_length
    max_response_length, temperature   generator.sampling_params.max_generate_length, temperature
    advantage_std_norm          trainer.algorithm.grpo_norm_by_std
    kl_coef, kl_estimator       trainer.algorithm.use_kl_loss, kl_loss_coef, kl_estimator_type
    steps, seed                 trainer.max_training_steps (trainer.epochs as many), trainer.seed
    dtype                       trainer.policy.fsdp_config.mixed_precision.param_dtype (bf16 | fp32),
                                trainer.bf16 (the model's load dtype)

    (loss_hparams no field carries)  GMPO_PLUGINS_LOSS_HPARAMS in the launch's environment, which
                                the script forwards to SkyRL's Ray workers
                                (``adapters.skyrl.entrypoint.forward_loss_hparams``): e.g.
                                {"dual_clip": 3.0} (SkyRL applies clip_ratio_c to its own
                                dual_clip loss only)

The adapter's own ``resolution_from_config`` reads the algorithm fields back, first without the
variable and then with what they leave different (``loss_override``); a hyper-parameter it
would still not reproduce is refused (the reduction and its length: SkyRL scales the
advantages by them before the loss).
"""

from __future__ import annotations

from types import SimpleNamespace

from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM_NORM, TOKEN_MEAN
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.datasets import SKYRL_ENV
from gmpo_plugins.frameworks.launch import OUT, Difference, Launch, UnsupportedSettingError
from gmpo_plugins.frameworks.spec import FIELDS, RunSpec
from gmpo_plugins.frameworks.translate._common import (
    adapter_options,
    advantage_formula,
    kl_placement,
    kl_refusal,
    loss_override,
    mini_batch_order,
    override_env,
    precision,
    reward_import,
)

NAME = "skyrl"
ALGORITHM = "trainer.algorithm"
KL_ESTIMATORS = {"k1": "k1", "k2": "k2", "k3": "k3"}
PARAM_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}
PREFIX = "gmpo_plugins."  # adapters.skyrl.registration.PREFIX: always a registered policy_loss_type
SKYRL_REDUCTION = {
    TOKEN_MEAN: "token_mean",
    SEQ_MEAN_TOKEN_MEAN: "sequence_mean",
    SEQ_MEAN_TOKEN_SUM_NORM: "seq_mean_token_sum_norm",
}

SCRIPT = '''"""SkyRL's main_base with the registry losses and the run spec's reward environment.

Written by gmpo-plugins frameworks.
"""

import sys

import ray
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.utils import validate_cfg
from skyrl.train.utils.utils import initialize_ray
from skyrl_gym.envs import register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from gmpo_plugins.adapters.skyrl.entrypoint import forward_loss_hparams
from gmpo_plugins.adapters.skyrl.registration import register_losses

{imports}

class RewardEnv(BaseTextEnv):
    """One step: the response is scored by the spec's reward(response, answer), then done."""

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        self.answer = (extras or {{}})["reward_spec"]["ground_truth"]

    def step(self, action):
        score = float(_reward(action, self.answer))
        return BaseTextEnvStepOutput(observations=[], reward=score, done=True, metadata={{}})


@ray.remote(num_cpus=1)
def entrypoint(cfg):
    register(id={env!r}, entry_point=RewardEnv)
    BasePPOExp(cfg).run()


def main():
    register_losses()  # before initialize_ray, which hands SkyRL's registry to its Ray actor
    cfg = SkyRLTrainConfig.from_cli_overrides(sys.argv[1:])
    validate_cfg(cfg)
    forward_loss_hparams()  # the Ray workers' environment carries GMPO_PLUGINS_LOSS_HPARAMS
    initialize_ray(cfg)
    ray.get(entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
'''


def differences(spec: RunSpec) -> tuple[Difference, ...]:
    """What SkyRL does that the spec cannot change (``first_update``: what reaches the first step)."""
    return (
        Difference(
            "advantages",
            "grpo: (r - group mean) / (group std + 1e-6) with grpo_norm_by_std, std unbiased (torch.std)",
            advantage_formula(spec, "1e-6"),
        ),
        Difference(
            "kl",
            "use_kl_loss: a separate KL loss term (kl_loss_coef * kl_estimator_type) added by SkyRL's worker; "
            "never inside the registry loss",
            kl_placement(spec, "a separate term, added by the worker"),
        ),
        Difference(
            "loss aggregation",
            "SkyRL divides the advantages of each global mini-batch by its sequence (or token) count before the "
            "workers; the registry loss then sums (adapters.skyrl.options: the same gradient as the core's rule)",
        ),
        Difference(
            "prompt order",
            "always shuffled (its training StatefulDataLoader is built with shuffle=True, a generator seeded "
            "with trainer.seed): each step draws trainer.train_batch_size of all the dataset's rows in a "
            "seeded random order",
            "a seeded shuffle of every row of the dataset",
        ),
        Difference(
            "precision",
            "FSDP2 mixed precision: float32 weights cast to param_dtype for forward and backward, float32 "
            "master weights, reduction and optimiser",
            precision(spec, "bf16 compute, float32 master weights"),
        ),
        Difference("rewards", "a skyrl_gym environment step per response (one turn, done)"),
        Difference(
            "mini-batch order",
            "the rollout batch split into mini-batches in rollout order, the same every epoch",
            mini_batch_order(spec, "rollout order"),
        ),
        Difference(
            "old log-probs",
            "fwd_logprobs_values_reward: a separate forward pass of the policy before the update, in its "
            "mini-batch packing (skipped only for SkyRL's own losses that use the rollout's log-probs)",
        ),
        Difference("rollouts", "SkyRL's inference engines (vLLM by default)"),
    )


def _algorithm(spec: RunSpec) -> tuple[dict[str, object], dict[str, object]]:
    """The ``trainer.algorithm`` fields the adapter translates, for the spec's loss, and what
    ``GMPO_PLUGINS_LOSS_HPARAMS`` carries (``loss_override``)."""
    loss = get_loss(spec.loss)
    params = spec.resolved_hparams()
    fields: dict[str, object] = {}
    if "eps_low" in loss.defaults:
        fields["eps_clip_low"] = params["eps_low"]
        fields["eps_clip_high"] = params["eps_high"]
    reduction = SEQ_MEAN_TOKEN_MEAN if loss.sequence_level else params.get("reduction", TOKEN_MEAN)
    fields["loss_reduction"] = SKYRL_REDUCTION[reduction]
    if reduction == SEQ_MEAN_TOKEN_SUM_NORM:
        fields["max_seq_len"] = params["norm_length"]
    options = adapter_options("skyrl")

    def read() -> dict[str, object]:
        try:
            return options.resolution_from_config(loss, SimpleNamespace(**fields), PREFIX + spec.loss).params()
        except options.SkyRLConfigError as exc:
            raise UnsupportedSettingError(NAME, f"loss={spec.loss}", str(exc)) from None

    return fields, loss_override(NAME, spec, read)


def _refusals(spec: RunSpec) -> None:
    if spec.tokenizer is not None and spec.tokenizer != spec.model:
        raise UnsupportedSettingError(
            NAME, f"tokenizer={spec.tokenizer}", "SkyRL loads the tokenizer from trainer.policy.model.path"
        )
    if spec.adam_eps != FIELDS["adam_eps"].default:
        raise UnsupportedSettingError(
            NAME, f"adam_eps={spec.adam_eps}", "trainer.policy.optimizer_config has no epsilon (AdamW's 1e-8)"
        )
    if spec.optimizer != "adamw":
        raise UnsupportedSettingError(
            NAME, f"optimizer={spec.optimizer!r}", "trainer.policy.optimizer_config configures AdamW only"
        )
    if spec.mini_batch_size % spec.rollouts_per_prompt:
        raise UnsupportedSettingError(
            NAME,
            f"mini_batch_size={spec.mini_batch_size}",
            f"trainer.policy_mini_batch_size counts prompts, so mini_batch_size must be a multiple of "
            f"rollouts_per_prompt={spec.rollouts_per_prompt}",
        )


def translate(spec: RunSpec) -> Launch:
    """SkyRL's launch for ``spec``: ``python3 {out}/skyrl_main.py OVERRIDES`` (module docstring)."""
    _refusals(spec)
    fields, extra = _algorithm(spec)
    use_kl = spec.kl_coef > 0
    kl = (
        [
            f"{ALGORITHM}.kl_loss_coef={spec.kl_coef}",
            f"{ALGORITHM}.kl_estimator_type={kl_refusal(NAME, spec, KL_ESTIMATORS, f'{ALGORITHM}.kl_estimator_type')}",
        ]
        if use_kl
        else []
    )
    optimizer = "trainer.policy.optimizer_config"
    overrides = [
        f"trainer.policy.model.path={spec.model}",
        f"data.train_data=['{OUT}/train.parquet']",
        f"data.val_data=['{OUT}/train.parquet']",
        f"environment.env_class={SKYRL_ENV}",
        f"{ALGORITHM}.advantage_estimator=grpo",
        f"{ALGORITHM}.grpo_norm_by_std={str(spec.advantage_std_norm).lower()}",
        f"{ALGORITHM}.policy_loss_type={PREFIX}{spec.loss}",
        *(f"{ALGORITHM}.{name}={value}" for name, value in fields.items()),
        f"{ALGORITHM}.use_kl_in_reward=false",
        f"{ALGORITHM}.use_kl_loss={str(use_kl).lower()}",
        *kl,
        f"{ALGORITHM}.use_entropy_loss=false",
        f"generator.n_samples_per_prompt={spec.rollouts_per_prompt}",
        f"generator.sampling_params.max_generate_length={spec.max_response_length}",
        f"generator.sampling_params.temperature={spec.temperature}",
        f"trainer.train_batch_size={spec.prompts_per_step}",
        f"trainer.policy_mini_batch_size={spec.mini_batch_size // spec.rollouts_per_prompt}",
        f"trainer.micro_train_batch_size_per_gpu={spec.micro_batch_size}",
        f"trainer.update_epochs_per_batch={spec.epochs_per_batch}",
        f"trainer.max_prompt_length={spec.max_prompt_length}",
        f"{optimizer}.lr={spec.learning_rate}",
        f"{optimizer}.weight_decay={spec.weight_decay}",
        f"{optimizer}.max_grad_norm={spec.max_grad_norm}",
        f"{optimizer}.scheduler=constant_with_warmup",
        f"{optimizer}.num_warmup_steps=0",
        f"trainer.policy.fsdp_config.mixed_precision.param_dtype={PARAM_DTYPES[spec.dtype]}",
        f"trainer.bf16={str(spec.dtype == 'bfloat16').lower()}",
        f"trainer.max_training_steps={spec.steps}",
        f"trainer.epochs={spec.steps}",
        f"trainer.seed={spec.seed}",
        "trainer.eval_before_train=false",
        "trainer.eval_interval=-1",
        "trainer.ckpt_interval=-1",
        "trainer.logger=console",
        f"trainer.ckpt_path={OUT}/ckpt",
        f"trainer.export_path={OUT}/export",
        f"trainer.log_path={OUT}/logs",
    ]
    prepare = (
        ("python3", "-m", "gmpo_plugins.frameworks.datasets", "skyrl", str(spec.dataset), f"{OUT}/train.parquet"),
    )
    script = SCRIPT.format(imports=reward_import(spec.reward), env=SKYRL_ENV)
    return Launch(
        NAME,
        ("python3", f"{OUT}/skyrl_main.py", *overrides),
        env=override_env(extra),
        files={"skyrl_main.py": script},
        prepare=prepare,
        differences=differences(spec),
    )
