"""The run spec as TRL 1.16 ``GRPOConfig`` keywords and a ``RegistryGRPOTrainer`` script.

spec                        GRPOConfig / script
model, tokenizer            RegistryGRPOTrainer(model=...), processing_class (AutoTokenizer)
dataset                     datasets.load_dataset(json | parquet); prompt -> one user message
reward                      a TRL reward function reward(completions, answer, **kwargs)
loss, loss_hparams          RegistryGRPOTrainer(loss=...); the adapter's fields
                            (``adapters.trl.options.TRANSLATED``): epsilon, epsilon_high, beta,
                            max_completion_length; every other hyper-parameter that differs from
                            the loss's default (dual_clip, kl_estimator, ...) in
                            GMPO_PLUGINS_LOSS_HPARAMS, the launch's environment, as for the other
                            frameworks
rollouts_per_prompt         num_generations
micro_batch_size            per_device_train_batch_size
mini_batch_size             gradient_accumulation_steps = mini_batch_size / micro_batch_size
prompts_per_step            steps_per_generation = responses per step / micro_batch_size
epochs_per_batch            num_iterations
optimizer, learning_rate    optim (adamw_torch | sgd), learning_rate, lr_scheduler_type constant,
                            warmup_steps 0
adam_eps                    adam_epsilon
weight_decay, max_grad_norm weight_decay, max_grad_norm
max_prompt_length           checked by the script (an error for a longer prompt, as verl's
                            data.truncation=error): GRPOConfig has no prompt limit
max_response_length         max_completion_length
temperature                 temperature
advantage_std_norm          scale_rewards group (true) | none (false)
kl_coef, kl_estimator       beta, kl_estimator in GMPO_PLUGINS_LOSS_HPARAMS (TRL loads the reference model)
steps                       max_steps = steps * optimiser steps per step * epochs_per_batch
seed                        seed; shuffle_dataset=False (prompts in file order, as verl's data.shuffle=false)
dtype                       bf16 (autocast over float32 weights; the script adds use_cpu without a GPU) or float32
"""

from __future__ import annotations

import pprint
from typing import Any

from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.frameworks.launch import OUT, Difference, Launch, UnsupportedSettingError
from gmpo_plugins.frameworks.spec import RunSpec
from gmpo_plugins.frameworks.translate._common import (
    FILE_ORDER,
    adapter_options,
    advantage_formula,
    check_hparams,
    kl_placement,
    mini_batch_order,
    override_env,
    precision,
    reward_import,
)

NAME = "trl"
OPTIMIZERS = {"adamw": "adamw_torch", "sgd": "sgd"}

SCRIPT = '''"""TRL's GRPOTrainer with the registry loss {loss!r} for a run spec.

Written by gmpo-plugins frameworks.
"""

import json
import sys

import torch
from datasets import load_dataset
from transformers import AutoTokenizer
from trl import GRPOConfig

from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

{imports}
MODEL = {model!r}
TOKENIZER = {tokenizer!r}
DATASET = {dataset!r}
MAX_PROMPT_LENGTH = {max_prompt_length!r}
LOSS = {loss!r}
CONFIG = {config}


def reward(completions, answer, **kwargs):
    """The spec's reward(response, answer) for every completion (conversational: the last message)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(_reward(text, label)) for text, label in zip(texts, answer)]


def as_messages(row):
    return {{"prompt": [{{"role": "user", "content": str(row["prompt"])}}], "answer": str(row["answer"])}}


def check_prompt_lengths(tokenizer, dataset):
    for index, row in enumerate(dataset):
        text = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if length > MAX_PROMPT_LENGTH:
            sys.exit(f"max_prompt_length: prompt {{index}} has {{length}} tokens, more than {{MAX_PROMPT_LENGTH}}")


def main():
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    kind = "parquet" if DATASET.endswith(".parquet") else "json"
    dataset = load_dataset(kind, data_files=DATASET, split="train").map(as_messages)
    check_prompt_lengths(tokenizer, dataset)
    config = dict(CONFIG)
    if not torch.cuda.is_available():  # without a GPU, Trainer accepts bf16 only with use_cpu
        config["use_cpu"] = True
    trainer = RegistryGRPOTrainer(
        model=MODEL,
        reward_funcs=reward,
        args=GRPOConfig(**config),
        train_dataset=dataset,
        processing_class=tokenizer,
        loss=LOSS,
    )
    trainer.train()
    with open(CONFIG["output_dir"] + "/log_history.json", "w") as handle:
        json.dump(trainer.state.log_history, handle)


if __name__ == "__main__":
    main()
'''


def differences(spec: RunSpec) -> tuple[Difference, ...]:
    """What TRL does that the spec cannot change (``first_update``: what reaches the first step)."""
    return (
        Difference(
            "advantages",
            "scale_rewards=group: (r - group mean) / (group std + 1e-4), std unbiased (nanstd); none: r - group mean",
            advantage_formula(spec, "1e-4"),
        ),
        Difference(
            "kl",
            "inside the registry loss: beta * the kl_estimator per token, averaged per sequence for "
            "sequence-level losses (TRL's GMPO placement), against a reference model TRL loads",
            kl_placement(spec, "inside the registry loss"),
        ),
        Difference(
            "loss aggregation",
            "the registry loss normalises by the sequences of the optimiser step over all accumulation "
            "steps and processes (adapters.trl.normalisation)",
        ),
        Difference(
            "prompt order",
            "shuffle_dataset=False: prompts in file order, each repeated num_generations",
            FILE_ORDER,
        ),
        Difference(
            "precision",
            "bf16 is autocast over float32 weights (Trainer's bf16), not bf16 weights",
            precision(spec, "bf16 autocast, float32 weights"),
        ),
        Difference(
            "mini-batch order",
            "GRPOTrainer shuffles each generation batch (shuffle_sequence_dict, its seeded generator) before "
            "splitting it into steps_per_generation micro-batches",
            mini_batch_order(spec, "a shuffle by TRL's seeded generator"),
        ),
        Difference(
            "old log-probs",
            "a separate forward pass before the update where gradient_accumulation_steps is not a multiple of "
            "steps_per_generation * num_iterations (several optimiser steps per generation batch) or vLLM's IS "
            "correction is on; otherwise the training forward's own log-probs, detached",
        ),
        Difference("rollouts", "TRL's own generation (transformers generate, or vLLM when use_vllm)"),
    )


def loss_hparams(spec: RunSpec, config: dict[str, Any]) -> dict[str, Any]:
    """What ``GMPO_PLUGINS_LOSS_HPARAMS`` carries for TRL: the hyper-parameters GRPOConfig does not
    carry that differ from the loss's defaults, checked against the adapter's table
    (``TRANSLATED``: hyper-parameter -> GRPOConfig field; the adapter needs TRL to run, so its
    table is read here, not its resolution)."""
    translated = adapter_options("trl").TRANSLATED
    loss = get_loss(spec.loss)
    params = spec.resolved_hparams()
    wanted = {"kl_beta": spec.kl_coef, "kl_estimator": spec.kl_estimator} if "kl_beta" in loss.defaults else {}
    if spec.kl_coef > 0 and "kl_beta" not in loss.defaults:
        raise UnsupportedSettingError(
            NAME, f"kl_coef={spec.kl_coef}", f"TRL adds KL inside the loss and {spec.loss} has no kl_beta"
        )
    target = {**params, **wanted}
    extra = {key: value for key, value in target.items() if key not in translated and value != loss.defaults[key]}
    expressed = {**extra}
    for key, field_name in translated.items():
        if key in loss.defaults and field_name in config:
            expressed[key] = config[field_name]
    check_hparams(
        NAME,
        spec,
        expressed,
        wanted=wanted,
        why="TRL takes it from GRPOConfig.max_completion_length = max_response_length",
    )
    return extra


def grpo_config(spec: RunSpec) -> dict[str, Any]:
    """The GRPOConfig keywords for ``spec`` (module docstring)."""
    loss = get_loss(spec.loss)
    params = spec.resolved_hparams()
    config: dict[str, Any] = {
        "output_dir": OUT,
        "num_generations": spec.rollouts_per_prompt,
        "per_device_train_batch_size": spec.micro_batch_size,
        "gradient_accumulation_steps": spec.mini_batch_size // spec.micro_batch_size,
        "steps_per_generation": spec.responses_per_step // spec.micro_batch_size,
        "num_iterations": spec.epochs_per_batch,
        "max_steps": spec.steps * spec.optimiser_steps_per_rl_step,
        "optim": OPTIMIZERS[spec.optimizer],
        "learning_rate": spec.learning_rate,
        "adam_epsilon": spec.adam_eps,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": spec.weight_decay,
        "max_grad_norm": spec.max_grad_norm,
        "max_completion_length": spec.max_response_length,
        "temperature": spec.temperature,
        "scale_rewards": "group" if spec.advantage_std_norm else "none",
        "beta": spec.kl_coef,
        "use_bias_correction_kl": False,  # the registry loss adds beta * KL without TRL's ratio factor
        "seed": spec.seed,
        "shuffle_dataset": False,  # prompts in file order, as verl's data.shuffle=false
        "bf16": spec.dtype == "bfloat16",
        "model_init_kwargs": {"dtype": "float32"},
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
    }
    if "eps_low" in loss.defaults:
        config["epsilon"] = params["eps_low"]
    if "eps_high" in loss.defaults:
        config["epsilon_high"] = params["eps_high"]
    return config


def translate(spec: RunSpec) -> Launch:
    """TRL's launch for ``spec``: ``python {out}/train_trl.py`` (module docstring)."""
    config = grpo_config(spec)
    extra = loss_hparams(spec, config)
    script = SCRIPT.format(
        imports=reward_import(spec.reward),
        model=str(spec.model),
        tokenizer=str(spec.tokenizer_path),
        dataset=str(spec.dataset),
        max_prompt_length=spec.max_prompt_length,
        loss=spec.loss,
        config=pprint.pformat(config, sort_dicts=False, width=100),
    )
    return Launch(
        NAME,
        ("python3", f"{OUT}/train_trl.py"),
        env=override_env(extra),
        files={"train_trl.py": script},
        differences=differences(spec),
    )
