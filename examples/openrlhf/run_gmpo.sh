#!/usr/bin/env bash
# GMPO (arXiv 2507.20673) with OpenRLHF on one node of 8 GPUs: vLLM rollouts, DeepSpeed ZeRO-3,
# actor, reference and vLLM colocated. NOT RUN by this project's tests (they need no GPU): the tests
# parse exactly these arguments with gmpo-openrlhf's parser (tests/openrlhf/e2e/test_example.py), and
# run the same entry point end to end on CPU with a tiny model (nox -s openrlhf_e2e).
#
#   pip install "gmpo-plugins[openrlhf]" "openrlhf[vllm]==0.11.2"
#   ray start --head --num-gpus 8
#   MODEL=Qwen/Qwen2.5-Math-7B PROMPTS=<your math prompts> REWARD=<reward_func file.py> bash run_gmpo.sh
#
# The paper's settings: 8 rollouts per prompt, 128 prompts per rollout (1024 samples) split into
# 8 updates of 128, learning rate 1e-6, up to 3000 generated tokens, no KL term (beta 0), the
# per-token log ratio clipped to (-0.4, 0.4). --reward.remote_url takes a Python file whose
# reward_func(queries, prompts, labels) returns {"rewards", "scores", "extra_logs"}, or a server URL.
set -euo pipefail

MODEL="${MODEL:-Qwen/Qwen2.5-Math-7B}"
PROMPTS="${PROMPTS:?set PROMPTS to a prompt dataset (jsonl or a Hugging Face dataset) with input and label}"
REWARD="${REWARD:?set REWARD to a reward_func Python file or a reward server URL}"
OUT="${OUT:-./checkpoints/gmpo-qwen2.5-math-7b}"

ray job submit --address="http://127.0.0.1:8265" \
  --runtime-env-json='{"worker_process_setup_hook": "gmpo_plugins.adapters.openrlhf.hook.setup_worker"}' \
  -- gmpo-openrlhf \
  --actor.model_name_or_path "$MODEL" \
  --data.prompt_dataset "$PROMPTS" \
  --data.input_key input \
  --data.label_key label \
  --data.apply_chat_template \
  --reward.remote_url "$REWARD" \
  --actor.num_nodes 1 \
  --actor.num_gpus_per_node 8 \
  --ref.num_nodes 1 \
  --ref.num_gpus_per_node 8 \
  --vllm.num_engines 4 \
  --vllm.tensor_parallel_size 2 \
  --vllm.gpu_memory_utilization 0.6 \
  --vllm.enable_sleep \
  --ds.enable_sleep \
  --train.colocate_all \
  --actor.policy_loss_type gmpo \
  --actor.eps_clip_low_high 0.4 0.4 \
  --algo.advantage.estimator group_norm \
  --algo.kl.init_coef 0 \
  --rollout.n_samples_per_prompt 8 \
  --rollout.batch_size 128 \
  --train.batch_size 128 \
  --rollout.micro_batch_size 8 \
  --train.micro_batch_size 4 \
  --rollout.max_new_tokens 3000 \
  --data.max_len 4096 \
  --rollout.temperature 1.0 \
  --actor.adam.lr 1e-6 \
  --actor.lr_warmup_ratio 0 \
  --train.num_episodes 1 \
  --ds.zero_stage 3 \
  --ds.param_dtype bf16 \
  --ds.packing_samples \
  --actor.gradient_checkpointing_enable \
  --ckpt.output_dir "$OUT" \
  --ckpt.path "$OUT/ckpt" \
  --ckpt.save_steps 20
