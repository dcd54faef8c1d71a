#!/usr/bin/env bash
# GMPO with verl on GPUs, with the settings of the GMPO paper (arXiv 2507.20673) for
# Qwen2.5-Math-7B: 8 rollouts per prompt, 128 prompts per rollout round (1024 responses)
# split into 8 policy updates of 128 responses, token clip eps = 0.4 in log space
# (ratio in (e^-0.4, e^0.4)), mean over each response's tokens, lr 1e-6, no KL term,
# responses up to 3000 tokens, vLLM rollout.
#
# NOT RUN HERE: written for an 8-GPU node with verl 0.9.x, vLLM and gmpo-plugins installed;
# this project has no GPU. Its overrides are composed against verl's own Hydra config and
# checked by gmpo-plugins' verl adapter in tests/verl_e2e/test_run_gmpo_script.py.
#
# Data: verl's RL parquet format (see verl/examples/data_preprocess/math_dataset.py);
# point TRAIN/VAL at your files. For the 1.5B model set MODEL=Qwen/Qwen2.5-Math-1.5B.
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-Math-7B}
TRAIN=${TRAIN:-$HOME/data/math/train.parquet}
VAL=${VAL:-$HOME/data/math/test.parquet}

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=false \
    data.train_files="$TRAIN" \
    data.val_files="$VAL" \
    data.train_batch_size=128 \
    data.max_prompt_length=1024 \
    data.max_response_length=3000 \
    data.filter_overlong_prompts=true \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=true \
    actor_rollout_ref.model.enable_gradient_checkpointing=true \
    actor_rollout_ref.actor.policy_loss.loss_mode=gmpo \
    actor_rollout_ref.actor.clip_ratio_low=0.4 \
    actor_rollout_ref.actor.clip_ratio_high=0.4 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.ppo_epochs=1 \
    actor_rollout_ref.actor.use_kl_loss=false \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.total_epochs=1 \
    trainer.logger='[console]' \
    trainer.project_name=gmpo \
    trainer.experiment_name=gmpo-qwen2.5-math-7b \
    "$@"
