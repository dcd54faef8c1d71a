"""The run spec as verl 0.9 Hydra overrides of ``python3 -m verl.trainer.main_ppo`` (GRPO).

    spec                        verl override
    model, tokenizer            actor_rollout_ref.model.path, +actor_rollout_ref.model.tokenizer_path
    dataset                     data.train_files / val_files = {out}/train.parquet (converted:
                                ``python -m gmpo_plugins.frameworks.datasets verl``), data.shuffle=false
    reward                      reward.custom_reward_function.path={out}/reward.py (compute_score bridge)
    loss, loss_hparams          actor.policy_loss.loss_mode=gmpo_plugins.<loss>; the adapter's fields
                                (``adapters.verl.options.FIELDS``): clip_ratio_low/high, clip_ratio_c,
                                loss_agg_mode, loss_scale_factor
    rollouts_per_prompt         actor_rollout_ref.rollout.n
    prompts_per_step            data.train_batch_size
    mini_batch_size             actor.ppo_mini_batch_size = mini_batch_size / rollouts_per_prompt
                                (verl counts prompts; must divide)
    micro_batch_size            actor.ppo_micro_batch_size_per_gpu (and the log-prob micro-batches)
    epochs_per_batch            actor.ppo_epochs
    optimizer, learning_rate    actor.optim.optimizer (AdamW | SGD), optim.lr, constant schedule
    adam_eps                    actor.optim.override_optimizer_config={eps: ...} (AdamW's keyword)
    weight_decay, max_grad_norm actor.optim.weight_decay, optim.clip_grad
    max_*_length, temperature   data.max_prompt_length / max_response_length, rollout.temperature
    advantage_std_norm          algorithm.norm_adv_by_std_in_grpo
    kl_coef, kl_estimator       actor.use_kl_loss, kl_loss_coef, kl_loss_type (k1 kl, k2 mse, k3 low_var_kl)
    steps                       trainer.total_training_steps
    seed                        data.seed
    dtype                       actor/ref fsdp_config.mixed_precision.param_dtype (bf16 | fp32)
    (metrics)                   trainer.logger=[console,file], VERL_FILE_LOGGER_PATH={out}/metrics.jsonl

    (loss_hparams no field carries)  GMPO_PLUGINS_LOSS_HPARAMS in the launch's environment (verl's
                                Ray workers inherit the driver's): e.g. {"dual_clip": null} for
                                grpo and dapo without a dual clip, as clip_ratio_c (3.0 unless
                                set) is always passed as one

The adapter's own ``resolution_from_config`` reads the translated actor fields back, first
without the variable and then with what they leave different (``loss_override``); a
hyper-parameter it would still not reproduce is refused.
"""

from __future__ import annotations

from types import SimpleNamespace

from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM_NORM
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.launch import OUT, Difference, Launch, UnsupportedSettingError
from gmpo_plugins.frameworks.spec import RunSpec
from gmpo_plugins.frameworks.translate._common import (
    FILE_ORDER,
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

NAME = "verl"
ACTOR = "actor_rollout_ref.actor"
KL_LOSS_TYPES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
OPTIMIZERS = {"adamw": "AdamW", "sgd": "SGD"}
PARAM_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}
PREFIX = "gmpo_plugins."  # adapters.verl.registration.PREFIX: always a registered loss_mode
VERL_DEFAULTS = {"clip_ratio": 0.2, "clip_ratio_c": 3.0, "loss_scale_factor": None}  # verl's actor config

REWARD_BRIDGE = '''"""verl's compute_score for the run spec's reward(response, answer) (written by gmpo-plugins)."""

{imports}

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(_reward(solution_str, ground_truth))
'''


def differences(spec: RunSpec) -> tuple[Difference, ...]:
    """What verl does that the spec cannot change (``first_update``: what reaches the first step)."""
    return (
        Difference(
            "advantages",
            "GRPO: (r - group mean) / (group std + 1e-6), std unbiased (torch.std), groups of rollout.n",
            advantage_formula(spec, "1e-6"),
        ),
        Difference(
            "kl",
            "a separate loss term in ppo_loss (use_kl_loss): kl_loss_coef * the per-token estimator "
            "aggregated with loss_agg_mode, added to the policy loss; never inside the registry loss",
            kl_placement(spec, "a separate term, aggregated with loss_agg_mode"),
        ),
        Difference(
            "loss aggregation",
            "the registry loss normalises by verl's global_batch_info: sequences of the whole mini-batch "
            "over all ranks (the core's rule)",
        ),
        Difference(
            "prompt order",
            "data.shuffle=false: prompts in file order, data.train_batch_size per step",
            FILE_ORDER,
        ),
        Difference(
            "precision",
            "FSDP mixed precision: parameters cast to param_dtype for forward and backward, float32 "
            "master weights, reduction and optimiser",
            precision(spec, "bf16 compute, float32 master weights"),
        ),
        Difference(
            "mini-batch order",
            "actor.shuffle=false: the rollout batch split into mini-batches in rollout order, the same every epoch",
            mini_batch_order(spec, "rollout order"),
        ),
        Difference(
            "old log-probs",
            "compute_log_prob: a separate forward pass of the actor over the rollout batch before the update "
            "(log_prob_micro_batch_size_per_gpu rows per pass); the rollout's own log-probs only with "
            "algorithm.rollout_correction.bypass_mode",
        ),
        Difference("rollouts", "verl's rollout server (vLLM/SGLang; an HF-generate stand-in on CPU)"),
    )


def _loss_fields(spec: RunSpec) -> dict[str, object]:
    """The actor fields the adapter translates, for the spec's loss."""
    loss = get_loss(spec.loss)
    params = spec.resolved_hparams()
    fields: dict[str, object] = {}
    if "eps_low" in loss.defaults:
        fields["clip_ratio_low"] = params["eps_low"]
        fields["clip_ratio_high"] = params["eps_high"]
    if params.get("dual_clip") is not None:
        fields["clip_ratio_c"] = params["dual_clip"]
    if "reduction" in loss.defaults:
        fields["loss_agg_mode"] = params["reduction"]
    else:
        fields["loss_agg_mode"] = SEQ_MEAN_TOKEN_MEAN if loss.sequence_level else "token-mean"
    if params.get("reduction") == SEQ_MEAN_TOKEN_SUM_NORM:
        fields["loss_scale_factor"] = params["norm_length"]
    return fields


def _check_loss(spec: RunSpec, fields: dict[str, object]) -> dict[str, object]:
    """What ``GMPO_PLUGINS_LOSS_HPARAMS`` carries for verl (``loss_override``)."""
    options = adapter_options("verl")
    loss_mode = PREFIX + spec.loss
    actor = SimpleNamespace(**{**VERL_DEFAULTS, **fields})

    def read() -> dict[str, object]:
        try:
            return options.resolution_from_config(get_loss(spec.loss), actor, actor.loss_agg_mode, loss_mode).params()
        except options.VerlConfigError as exc:
            raise UnsupportedSettingError(NAME, f"loss={spec.loss}", str(exc)) from None

    return loss_override(NAME, spec, read)


def _kl(spec: RunSpec) -> list[str]:
    loss_type = kl_refusal(NAME, spec, KL_LOSS_TYPES, f"{ACTOR}.kl_loss_type")
    return [f"{ACTOR}.kl_loss_coef={spec.kl_coef}", f"{ACTOR}.kl_loss_type={loss_type}"]


def translate(spec: RunSpec) -> Launch:
    """verl's launch for ``spec`` (module docstring); UnsupportedSettingError otherwise."""
    if spec.mini_batch_size % spec.rollouts_per_prompt:
        raise UnsupportedSettingError(
            NAME,
            f"mini_batch_size={spec.mini_batch_size}",
            f"{ACTOR}.ppo_mini_batch_size counts prompts, so mini_batch_size must be a multiple of "
            f"rollouts_per_prompt={spec.rollouts_per_prompt}",
        )
    fields = _loss_fields(spec)
    extra = _check_loss(spec, fields)
    dtype = PARAM_DTYPES[spec.dtype]
    precision = f"{{param_dtype:{dtype},reduce_dtype:fp32,buffer_dtype:fp32}}"
    use_kl = spec.kl_coef > 0
    overrides = [
        "algorithm.adv_estimator=grpo",
        f"algorithm.norm_adv_by_std_in_grpo={str(spec.advantage_std_norm).lower()}",
        "algorithm.use_kl_in_reward=false",
        "critic.enable=false",
        f"data.train_files={OUT}/train.parquet",
        f"data.val_files={OUT}/train.parquet",
        "data.shuffle=false",
        f"data.seed={spec.seed}",
        f"data.train_batch_size={spec.prompts_per_step}",
        f"data.max_prompt_length={spec.max_prompt_length}",
        f"data.max_response_length={spec.max_response_length}",
        f"actor_rollout_ref.model.path={spec.model}",
        *([f"+actor_rollout_ref.model.tokenizer_path={spec.tokenizer}"] if spec.tokenizer is not None else []),
        f"actor_rollout_ref.rollout.n={spec.rollouts_per_prompt}",
        f"actor_rollout_ref.rollout.temperature={spec.temperature}",
        f"{ACTOR}.policy_loss.loss_mode={PREFIX}{spec.loss}",
        *(f"{ACTOR}.{name}={value}" for name, value in fields.items()),
        f"{ACTOR}.ppo_mini_batch_size={spec.mini_batch_size // spec.rollouts_per_prompt}",
        f"{ACTOR}.ppo_micro_batch_size_per_gpu={spec.micro_batch_size}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={spec.micro_batch_size}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={spec.micro_batch_size}",
        f"{ACTOR}.ppo_epochs={spec.epochs_per_batch}",
        f"{ACTOR}.optim.optimizer={OPTIMIZERS[spec.optimizer]}",
        f"{ACTOR}.optim.lr={spec.learning_rate}",
        f"{ACTOR}.optim.lr_warmup_steps_ratio=0.0",
        f"{ACTOR}.optim.weight_decay={spec.weight_decay}",
        f"{ACTOR}.optim.clip_grad={spec.max_grad_norm}",
        *(
            [f"++{ACTOR}.optim.override_optimizer_config={{eps:{spec.adam_eps!r}}}"]
            if spec.optimizer == "adamw"
            else []
        ),
        f"{ACTOR}.use_kl_loss={str(use_kl).lower()}",
        *(_kl(spec) if use_kl else []),
        f"{ACTOR}.entropy_coeff=0",
        f"++{ACTOR}.fsdp_config.mixed_precision={precision}",
        f"++actor_rollout_ref.ref.fsdp_config.mixed_precision={precision}",
        f"reward.custom_reward_function.path={OUT}/reward.py",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={spec.steps}",
        f"trainer.total_epochs={spec.steps}",
        "trainer.balance_batch=false",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console,file]",
        f"trainer.default_local_dir={OUT}/checkpoints",
    ]
    prepare = (
        ("python3", "-m", "gmpo_plugins.frameworks.datasets", "verl", str(spec.dataset), f"{OUT}/train.parquet"),
    )
    bridge = REWARD_BRIDGE.format(imports=reward_import(spec.reward))
    return Launch(
        NAME,
        ("python3", "-m", "verl.trainer.main_ppo", *overrides),
        env={"VERL_FILE_LOGGER_PATH": f"{OUT}/metrics.jsonl", **override_env(extra)},
        files={"reward.py": bridge},
        prepare=prepare,
        differences=differences(spec),
    )
