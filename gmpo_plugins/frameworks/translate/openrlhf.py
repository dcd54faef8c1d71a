"""The run spec as ``gmpo-openrlhf`` arguments (OpenRLHF 0.11's ``train_ppo_ray`` with registry losses).

    spec                        gmpo-openrlhf argument
    model                       --actor.model_name_or_path (the tokenizer is loaded from it: a
                                separate ``tokenizer`` is refused)
    dataset                     --data.prompt_dataset, --data.input_key prompt, --data.label_key answer,
                                --data.apply_chat_template
    reward                      --reward.remote_url {out}/reward.py (reward_func bridge: the response is the
                                query after the decoded prompt tokens, special tokens removed)
    loss, loss_hparams          --actor.policy_loss_type gmpo_plugins.<loss>; the adapter's flags
                                (``adapters.openrlhf.options.FLAGS``): --actor.eps_clip_low_high,
                                --actor.dual_clip, --actor.loss_agg_mode
    rollouts_per_prompt         --rollout.n_samples_per_prompt
    prompts_per_step            --rollout.batch_size
    mini_batch_size             --train.batch_size (responses)
    micro_batch_size            --train.micro_batch_size
    epochs_per_batch            --train.max_epochs
    optimizer, learning_rate    --actor.optim adam (OpenRLHF has no SGD: refused), --actor.adam.lr,
                                --actor.lr_scheduler constant, --actor.lr_warmup_ratio 0
    adam_eps                    --actor.adam.eps
    weight_decay, max_grad_norm --actor.adam.weight_decay, --actor.max_norm
    max_prompt_length + max_response_length   --data.max_len (prompt and response together)
    max_response_length, temperature          --rollout.max_new_tokens, --rollout.temperature
    advantage_std_norm          --algo.advantage.estimator group_norm (true) | dr_grpo (false: r - mean)
    kl_coef, kl_estimator       --algo.kl.use_loss --algo.kl.init_coef --algo.kl.estimator (0: init_coef 0)
    steps                       --data.max_samples steps * prompts_per_step with --train.num_episodes 1
    seed                        --train.seed
    dtype                       --ds.param_dtype bf16 | fp32 (stock OpenRLHF offers bf16 and fp16 only: fp32
                                runs with the CPU stand-ins of examples/openrlhf_cpu, a ``precision``
                                difference)

    (loss_hparams no flag carries)  GMPO_PLUGINS_LOSS_HPARAMS in the launch's environment, which
                                gmpo-openrlhf forwards to its Ray workers

Adam's betas are set to torch's (0.9, 0.999), as the other frameworks use (OpenRLHF's default
is (0.9, 0.95)). The adapter's own ``loss_resolution`` and ``check_advantages`` read the
translated flags back, first without the variable and then with what the flags leave
different (``loss_override``); a hyper-parameter they would still not reproduce is refused.
"""

from __future__ import annotations

from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN
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

NAME = "openrlhf"
KL_ESTIMATORS = {"k1": "k1", "k2": "k2", "k3": "k3"}
PARAM_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}

REWARD_BRIDGE = '''"""OpenRLHF's reward_func for the run spec's reward(response, answer) (written by gmpo-plugins).

OpenRLHF passes each query as its prompt and response tokens decoded together (special tokens
kept), and the prompt as its chat-template text, which a tokenizer need not decode back to the
same characters. The response is what follows the prompt's tokens decoded, with the tokenizer's
special tokens removed, as TRL and verl decode responses (the whole query when it starts with
neither the decoded prompt nor its text: a prompt OpenRLHF truncated).
"""

import functools

import torch
from transformers import AutoTokenizer

{imports}

@functools.cache
def _tokenizer():
    return AutoTokenizer.from_pretrained({tokenizer!r})


def _response(query, prompt):
    tokenizer = _tokenizer()
    decoded = tokenizer.decode(tokenizer(prompt, add_special_tokens=False)["input_ids"], skip_special_tokens=False)
    head = next((text for text in (decoded, prompt) if query.startswith(text)), "")
    response = query[len(head):]
    for special in tokenizer.all_special_tokens:
        response = response.replace(special, "")
    return response


def reward_func(queries, prompts, labels, **kwargs):
    scores = [float(_reward(_response(query, prompt), label)) for query, prompt, label in zip(queries, prompts, labels)]
    rewards = torch.tensor(scores, dtype=torch.float32)
    return {{"rewards": rewards, "scores": rewards, "extra_logs": {{}}}}
'''


def differences(spec: RunSpec) -> tuple[Difference, ...]:
    """What OpenRLHF does that the spec cannot change (``first_update``: what reaches the first step)."""
    return (
        Difference(
            "advantages",
            "group_norm: (r - group mean) / (group std + 1e-9), std unbiased; dr_grpo when advantage_std_norm "
            "is false: r - group mean",
            advantage_formula(spec, "1e-9"),
        ),
        Difference(
            "kl",
            "--algo.kl.use_loss: a separate KL loss term in ActorPPOTrainer, a token mean whatever "
            "--actor.loss_agg_mode says; never inside the registry loss",
            kl_placement(spec, "a separate term, a token mean"),
        ),
        Difference(
            "loss aggregation",
            "the registry loss normalises by the global_batch_size OpenRLHF passes per optimiser step "
            "(all micro-batches and ranks, divided by the accumulation steps; DeepSpeed scales by 1/gas)",
        ),
        Difference(
            "prompt order",
            "always shuffled: its prompts dataloader is built with shuffle=True (not configurable) in the "
            "PPO trainer's Ray actor, whose random state --train.seed does not fix (two runs of the example "
            "drew different first batches); each step takes --rollout.batch_size of the first "
            "--data.max_samples rows",
            FILE_ORDER if spec.steps == 1 else "a shuffle of the first steps * prompts_per_step rows",
        ),
        Difference("rewards", "clipped to --reward.clip_range (default [-10, 10]) before the advantages"),
        Difference(
            "prompts",
            "the chat template receives one user message; a prompt with <image> tags becomes a list of parts",
        ),
        Difference("lengths", "no separate prompt limit: --data.max_len bounds prompt and response together"),
        Difference(
            "precision",
            "DeepSpeed bf16: bf16 weights, float32 master weights in the optimiser"
            if spec.dtype == "bfloat16"
            else "stock OpenRLHF accepts --ds.param_dtype bf16 or fp16 only; fp32 runs only with the CPU "
            "stand-ins' patch (examples/openrlhf_cpu/standins), which adds it",
            precision(spec, "bf16 weights, float32 master weights"),
        ),
        Difference(
            "mini-batch order",
            "its replay buffer's DataLoader is built with shuffle=True (not configurable without ring "
            "attention, tensor parallelism or dynamic batches): a new shuffle every epoch",
            mini_batch_order(spec, "a shuffle by OpenRLHF's replay-buffer DataLoader, new every epoch"),
        ),
        Difference(
            "old log-probs",
            "the experience maker's forward pass of the actor before the update (action_log_probs); the "
            "engines' log-probs enter only the IS correction (--algo.advantage.is_correction_level)",
        ),
        Difference("rollouts", "vLLM engines (a stand-in on CPU), weights synced after every step"),
    )


def _loss_args(spec: RunSpec) -> tuple[list[str], dict[str, object]]:
    """The adapter's flags for the spec's loss, checked by reading them back with the adapter,
    and what ``GMPO_PLUGINS_LOSS_HPARAMS`` carries (``loss_override``)."""
    options = adapter_options("openrlhf")
    loss = get_loss(spec.loss)
    params = spec.resolved_hparams()
    policy_loss_type = options.PREFIX + spec.loss
    token_level = not loss.sequence_level and params.get("reduction", TOKEN_MEAN) == TOKEN_MEAN
    eps = (params["eps_low"], params["eps_high"]) if "eps_low" in loss.defaults else (0.2, 0.2)
    dual_clip = params.get("dual_clip")
    use_kl = spec.kl_coef > 0

    def read() -> dict[str, object]:
        try:
            resolution = options.loss_resolution(
                policy_loss_type,
                clip_eps_low=eps[0],
                clip_eps_high=eps[1],
                dual_clip=dual_clip,
                token_level_loss=token_level,
            )
            options.check_advantages(
                loss,
                policy_loss_type,
                estimator="group_norm",
                gamma=1.0,
                kl_use_loss=use_kl,
                kl_init_coef=spec.kl_coef,
            )
        except options.OpenRLHFConfigError as exc:
            raise UnsupportedSettingError(NAME, f"loss={spec.loss}", str(exc)) from None
        assert resolution is not None  # PREFIX always selects a registry loss
        return resolution.params()

    extra = loss_override(NAME, spec, read)
    args = ["--actor.policy_loss_type", policy_loss_type]
    if "eps_low" in loss.defaults:
        args += ["--actor.eps_clip_low_high", str(eps[0]), str(eps[1])]
    if dual_clip is not None:
        args += ["--actor.dual_clip", str(dual_clip)]
    args += ["--actor.loss_agg_mode", TOKEN_MEAN if token_level else SEQ_MEAN_TOKEN_MEAN]
    return args, extra


def _refusals(spec: RunSpec) -> None:
    if spec.tokenizer is not None and spec.tokenizer != spec.model:
        raise UnsupportedSettingError(
            NAME, f"tokenizer={spec.tokenizer}", "OpenRLHF loads the tokenizer from --actor.model_name_or_path"
        )
    if spec.optimizer != "adamw":
        raise UnsupportedSettingError(NAME, f"optimizer={spec.optimizer!r}", "--actor.optim offers adam and muon")


def translate(spec: RunSpec) -> Launch:
    """OpenRLHF's launch for ``spec`` (module docstring); UnsupportedSettingError otherwise."""
    _refusals(spec)
    loss_args, extra = _loss_args(spec)
    kl = (
        [
            "--algo.kl.use_loss",
            "--algo.kl.init_coef",
            str(spec.kl_coef),
            "--algo.kl.estimator",
            kl_refusal(NAME, spec, KL_ESTIMATORS, "--algo.kl.estimator"),
        ]
        if spec.kl_coef > 0
        else ["--algo.kl.init_coef", "0"]
    )
    argv = [
        "gmpo-openrlhf",
        "--actor.model_name_or_path",
        str(spec.model),
        "--data.prompt_dataset",
        str(spec.dataset),
        "--data.input_key",
        "prompt",
        "--data.label_key",
        "answer",
        "--data.apply_chat_template",
        "--data.max_samples",
        str(spec.steps * spec.prompts_per_step),
        "--data.max_len",
        str(spec.max_prompt_length + spec.max_response_length),
        "--reward.remote_url",
        f"{OUT}/reward.py",
        *loss_args,
        "--algo.advantage.estimator",
        "group_norm" if spec.advantage_std_norm else "dr_grpo",
        *kl,
        "--rollout.n_samples_per_prompt",
        str(spec.rollouts_per_prompt),
        "--rollout.batch_size",
        str(spec.prompts_per_step),
        "--rollout.max_new_tokens",
        str(spec.max_response_length),
        "--rollout.temperature",
        str(spec.temperature),
        "--train.batch_size",
        str(spec.mini_batch_size),
        "--train.micro_batch_size",
        str(spec.micro_batch_size),
        "--train.max_epochs",
        str(spec.epochs_per_batch),
        "--train.num_episodes",
        "1",
        "--train.seed",
        str(spec.seed),
        "--actor.optim",
        "adam",
        "--actor.adam.lr",
        str(spec.learning_rate),
        "--actor.adam.betas",
        "0.9",
        "0.999",
        "--actor.adam.eps",
        str(spec.adam_eps),
        "--actor.adam.weight_decay",
        str(spec.weight_decay),
        "--actor.lr_scheduler",
        "constant",
        "--actor.lr_warmup_ratio",
        "0",
        "--actor.max_norm",
        str(spec.max_grad_norm),
        "--ds.param_dtype",
        PARAM_DTYPES[spec.dtype],
        "--ckpt.output_dir",
        f"{OUT}/final",
        "--ckpt.path",
        f"{OUT}/ckpt",
        "--logger.tensorboard_dir",
        f"{OUT}/tensorboard",
    ]
    bridge = REWARD_BRIDGE.format(imports=reward_import(spec.reward), tokenizer=str(spec.tokenizer_path))
    return Launch(
        NAME, tuple(argv), env=override_env(extra), files={"reward.py": bridge}, differences=differences(spec)
    )
