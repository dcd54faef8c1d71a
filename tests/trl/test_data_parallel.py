"""Two real processes (accelerate on gloo, CPU): each RegistryGRPOTrainer gets half of a
micro-batch; with its gradients averaged as DDP averages them, it must equal one process
on the whole micro-batch, and the metrics gathered through the accelerator (TRL's
collectives) must equal the single-process metrics of the whole batch."""

from __future__ import annotations

import os

import torch
import torch.multiprocessing as mp

from .tiny import PROMPTS, build_tokenizer, count_digits_reward, grpo_config, micro_batch, run_loss

WORLD = 2
ROWS = 6
COMPARED = (
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "kl",
    "entropy",
    "policy_loss",
    "ppo_kl",
    "log_ratio_min",
    "log_ratio_max",
    "seq_weight_min",
    "seq_weight_mean",
    "seq_weight_max",
)


def _trainer(model_dir: str, output_dir: str):
    from datasets import Dataset

    from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

    return RegistryGRPOTrainer(
        model=model_dir,
        reward_funcs=count_digits_reward,
        args=grpo_config(output_dir, epsilon=0.3, epsilon_high=0.25, beta=0.04, use_bias_correction_kl=False),
        train_dataset=Dataset.from_dict({"prompt": PROMPTS * 2}),
        processing_class=build_tokenizer(),
        loss="gmpo",
    )


def _worker(rank: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        TRL_EXPERIMENTAL_SILENCE="1",
    )
    import torch.distributed as dist

    # a file rendezvous (no TCP port to collide with); accelerate uses an existing group
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=WORLD)
    trainer = _trainer(model_dir, os.path.join(out_dir, f"rank{rank}"))
    assert trainer.accelerator.num_processes == WORLD
    inputs = micro_batch(trainer, seed=11, batch=ROWS, spread=0.35)
    half = slice(rank * ROWS // WORLD, (rank + 1) * ROWS // WORLD)
    shard = {key: (value[half] if key != "num_items_in_batch" else value) for key, value in inputs.items()}
    _, grads, metrics = run_loss(trainer, shard)
    for grad in grads.values():  # DDP: average the ranks' gradients
        dist.all_reduce(grad)
        grad /= WORLD
    if rank == 0:
        torch.save({"grads": grads, "metrics": metrics}, os.path.join(out_dir, "result.pt"))
    dist.barrier()


def test_two_processes_equal_one_whole_batch(model_dir, tmp_path):
    mp.spawn(_worker, args=(model_dir, str(tmp_path)), nprocs=WORLD, join=True)
    result = torch.load(tmp_path / "result.pt")

    single = _trainer(model_dir, str(tmp_path / "single"))
    inputs = micro_batch(single, seed=11, batch=ROWS, spread=0.35)
    _, grads, metrics = run_loss(single, inputs)

    assert grads.keys() == result["grads"].keys()
    assert max((grads[k] - result["grads"][k]).abs().max().item() for k in grads) <= 1e-6
    for name in COMPARED:
        assert abs(metrics[name] - result["metrics"][name]) <= 1e-6, (name, metrics[name], result["metrics"][name])
    assert metrics["clip_ratio/region_mean"] > 0
