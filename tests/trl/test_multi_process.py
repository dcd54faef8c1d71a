"""``use_liger_kernel=True`` on two real processes (gloo, CPU): the hidden-state path runs
inside the prepared model's forward, so the data-parallel wrapper does its work.

    DDP     accelerate's multi-CPU DDP (what ``accelerate launch`` gives on CPU), one real
            ``trainer.train()`` step per loss (gmpo, grpo) and path (fused, unfused): the
            ranks train on different completions, and after the step their parameters are
            equal, and equal to the unfused path's. A hidden-state forward outside the DDP
            wrapper leaves each rank with its own gradient, so the ranks' parameters differ.
            The same step with real checks the group ids each process's loss gets.
    FSDP2   accelerate selects FSDP only for GPU-like devices, so torch's own ``fully_shard``
            (each decoder layer, then the root, which owns the embedding and the lm_head) wraps
            the trainer's model on a CPU mesh, and the trainer's ``_compute_loss`` runs on each
            rank's half of a micro-batch: the averaged (reduce-scattered) gradient equals one
            process's unfused gradient of the whole micro-batch.
    ZeRO-3  accelerate selects DeepSpeed only for GPU-like devices too, so DeepSpeed's own engine
            (``deepspeed.initialize``, ZeRO stage 3 on its CPU accelerator, gloo) wraps the trainer's
            model, with the DeepSpeed config registered as transformers' ``HfDeepSpeedConfig`` (as
            ``TrainingArguments`` registers it, so TRL sees ZeRO-3), and the trainer's ``_compute_loss``
            runs through the engine on each rank's half of a micro-batch, fused and unfused; one SGD
            step at lr 1
            (``engine.backward``, ``engine.step``): the update is minus the averaged gradient, equal
            to one process's unfused gradient of the whole micro-batch. Outside the head's own
            forward ZeRO-3 leaves the lm_head weight an empty partition, so this passes only if the
            hidden-state path gathers it (forward and backward).

Both run in one spawn of two workers (the start-up of two processes importing TRL is most of
the cost); each scenario records its outcome or its traceback, and the tests below read them.
Liger's layer kernels need a GPU: ``liger_kernel_config`` switches them off (as in
``test_fused_linear``), so the fused and unfused trainers run the same model code.
"""

from __future__ import annotations

import datetime
import os
import traceback

import pytest
import torch
import torch.multiprocessing as mp

from .test_fused_linear import LAYER_KERNELS_OFF, LIGER_DEPRECATED
from .tiny import PROMPTS, build_tokenizer, count_digits_reward, grpo_config, micro_batch

pytest.importorskip("liger_kernel")

WORLD = 2
ROWS = 6
LOSSES = ("gmpo", "grpo")
CONFIG = {
    "gmpo": {"epsilon": 0.4, "beta": 0.04, "use_bias_correction_kl": False},
    "grpo": {"epsilon": 0.2, "beta": 0.0},
    "real": {},
}


def _trainer(model_dir: str, output_dir: str, loss: str, liger: bool, reward=count_digits_reward, **config):
    from datasets import Dataset

    from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

    extra = {"use_liger_kernel": True, "liger_kernel_config": dict(LAYER_KERNELS_OFF)} if liger else {}
    return RegistryGRPOTrainer(
        model=model_dir,
        reward_funcs=reward,
        args=grpo_config(output_dir, **CONFIG[loss], **extra, **config),
        train_dataset=Dataset.from_dict({"prompt": PROMPTS * 2}),
        processing_class=build_tokenizer(),
        loss=loss,
    )


def _ddp_step(model_dir: str, out_dir: str, loss: str, liger: bool) -> dict:
    """One ``trainer.train()`` step; the parameters after it and the completions this rank scored."""
    from torch.nn.parallel import DistributedDataParallel

    seen: list[str] = []

    def digits(completions, **kwargs):
        seen.extend(completions)
        return count_digits_reward(completions)

    trainer = _trainer(model_dir, out_dir, loss, liger, digits, max_steps=1, optim="sgd")
    groups: list[tuple[torch.Tensor, torch.Tensor]] = []
    group_ids = trainer._group_ids

    def recorded(inputs):
        found = group_ids(inputs)
        if found is not None:
            groups.append((found.clone(), inputs["advantages"].detach().clone()))
        return found

    trainer._group_ids = recorded
    trainer.train()
    assert isinstance(trainer.model_wrapped, DistributedDataParallel)
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return {"params": params, "completions": seen, "groups": groups}


def _half(trainer, rank: int) -> dict:
    """This rank's half of the micro-batch every scenario below shares (the same on both ranks)."""
    inputs = micro_batch(trainer, seed=11, batch=ROWS, spread=0.35)
    half = slice(rank * ROWS // WORLD, (rank + 1) * ROWS // WORLD)
    return {key: (value[half] if key != "num_items_in_batch" else value) for key, value in inputs.items()}


def _whole_batch_gradient(model_dir: str, output_dir: str, loss: str) -> dict:
    """One process's unfused gradient of that whole micro-batch, by parameter name."""
    single = _trainer(model_dir, output_dir, loss, False)
    inputs = micro_batch(single, seed=11, batch=ROWS, spread=0.35)
    single.model.train()
    single.current_gradient_accumulation_steps = 1
    single._compute_loss(single.model, inputs).backward()
    return {name: p.grad for name, p in single.model.named_parameters()}


def _fsdp_grads(model_dir: str, out_dir: str, loss: str, rank: int) -> dict:
    """``_compute_loss`` of this rank's half of a micro-batch under FSDP2; the full gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    trainer = _trainer(model_dir, out_dir, loss, True)
    shard = _half(trainer, rank)
    model = trainer.model
    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    trainer._compute_loss(model, shard).backward()
    return {name: p.grad.full_tensor() for name, p in model.named_parameters()}


ZERO3 = {
    "train_micro_batch_size_per_gpu": ROWS // WORLD,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 0.0,
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},  # partition every tensor
    "zero_allow_untested_optimizer": True,
}


def _zero3_update(model_dir: str, out_dir: str, loss: str, rank: int, liger: bool) -> dict:
    """One SGD step (lr 1) of this rank's half of a micro-batch through a ZeRO-3 engine; the
    update of every parameter (after - before, gathered)."""
    import deepspeed
    from transformers.integrations.deepspeed import HfDeepSpeedConfig

    trainer = _trainer(model_dir, out_dir, loss, liger)
    shard = _half(trainer, rank)
    model = trainer.model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    registered = HfDeepSpeedConfig(ZERO3)  # transformers' is_deepspeed_zero3_enabled() while it lives
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=dict(ZERO3))
    engine.train()
    trainer.current_gradient_accumulation_steps = 1
    head = model.get_output_embeddings().weight
    assert head.numel() == 0  # partitioned: only a forward of the head (or a gather) materialises it
    engine.backward(trainer._compute_loss(engine, shard))
    engine.step()
    update = {}
    for name, p in engine.module.named_parameters():
        with deepspeed.zero.GatheredParameters([p]):
            update[name] = p.detach() - before[name]
    del registered
    return update


def _worker(rank: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        TRL_EXPERIMENTAL_SILENCE="1",
    )
    import warnings

    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # TRL: use_liger_kernel is deprecated
    torch.set_num_threads(1)  # two processes on the machine's cores, not each on all of them
    # a file rendezvous (no TCP port to collide with); accelerate uses an existing group
    dist.init_process_group(
        "gloo",
        init_method=f"file://{out_dir}/rendezvous",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=60),
    )
    results: dict = {}
    scenarios = [("ddp", loss, liger) for loss in (*LOSSES, "real") for liger in (True, False)]
    scenarios += [("fsdp", loss, True) for loss in LOSSES]
    scenarios += [("zero3", loss, liger) for loss in LOSSES for liger in (True, False)]
    for kind, loss, liger in scenarios:
        run_dir = os.path.join(out_dir, f"{kind}-{loss}-{liger}-rank{rank}")
        try:
            if kind == "ddp":
                results[kind, loss, liger] = _ddp_step(model_dir, run_dir, loss, liger)
            elif kind == "fsdp":
                results[kind, loss, liger] = _fsdp_grads(model_dir, run_dir, loss, rank)
            else:
                results[kind, loss, liger] = _zero3_update(model_dir, run_dir, loss, rank, liger)
        except Exception:  # noqa: BLE001 - recorded; the tests report it, and the next scenario still runs
            results[kind, loss, liger] = traceback.format_exc()
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(model_dir, tmp_path_factory) -> list[dict]:
    out_dir = tmp_path_factory.mktemp("two-processes")
    mp.spawn(_worker, args=(model_dir, str(out_dir)), nprocs=WORLD, join=True)
    return [torch.load(out_dir / f"rank{rank}.pt") for rank in range(WORLD)]


def _outcome(ranks: list[dict], *key) -> list:
    outcomes = [result[key] for result in ranks]
    for rank, outcome in enumerate(outcomes):
        assert not isinstance(outcome, str), f"rank {rank}, {key}:\n{outcome}"
    return outcomes


@pytest.mark.parametrize("loss", LOSSES)
def test_ddp_step_keeps_the_ranks_equal_and_equals_the_unfused_step(loss, ranks):
    """Equal across ranks: exactly (DDP all-reduces one gradient, every rank applies it).
    Fused against unfused: float32, the two paths sum the lm_head products in other orders
    (~1e-6 on a gradient entry), one SGD step at lr 1e-2 moves a parameter by lr * grad: within
    1e-7 (as in ``test_fused_linear``)."""
    fused = _outcome(ranks, "ddp", loss, True)
    unfused = _outcome(ranks, "ddp", loss, False)
    assert fused[0]["completions"] != fused[1]["completions"]  # the ranks' gradients differ before the all-reduce
    moved = 0.0
    for name, value in unfused[0]["params"].items():
        assert torch.equal(fused[0]["params"][name], fused[1]["params"][name]), f"fused path, ranks differ: {name}"
        assert torch.equal(value, unfused[1]["params"][name]), f"unfused path, ranks differ: {name}"
        torch.testing.assert_close(fused[0]["params"][name], value, rtol=1e-6, atol=1e-7, msg=name)
        moved = max(moved, (value - fused[0]["params"][name]).abs().max().item())
    print(f"{loss}: fused vs unfused parameters after one DDP step differ by at most {moved:.2e}")


@pytest.mark.parametrize("liger", [True, False])
def test_real_gets_each_processs_own_groups(liger, ranks):
    """real (which reads ``group_ids``) under DDP, 4 completions per process (2 prompts x
    num_generations 2): rank r's loss gets the whole groups 2r and 2r + 1, the groups TRL formed
    over the gathered batch (its advantages, normalised per group across the processes, sum to
    0 within each), and the ranks' parameters stay equal."""
    outcomes = _outcome(ranks, "ddp", "real", liger)
    for rank, outcome in enumerate(outcomes):
        assert outcome["groups"], f"rank {rank}: the loss got no group ids"
        for groups, advantages in outcome["groups"]:
            assert sorted(groups.tolist()) == [2 * rank, 2 * rank, 2 * rank + 1, 2 * rank + 1]
            for group in groups.unique():
                assert abs(advantages[groups == group].sum().item()) < 1e-5
    for name, value in outcomes[0]["params"].items():
        assert torch.equal(value, outcomes[1]["params"][name]), f"ranks differ: {name}"


@pytest.mark.parametrize("loss", LOSSES)
def test_fsdp2_gradient_equals_one_process_on_the_whole_batch(loss, ranks, model_dir, tmp_path):
    """FSDP2 averages the ranks' gradients (reduce-scatter); each rank's loss is normalised by
    the global batch, so the average is one process's gradient of the whole micro-batch. float32,
    fused against unfused (summation order): within 1e-6 (as ``test_data_parallel``)."""
    grads = _outcome(ranks, "fsdp", loss, True)
    reference = _whole_batch_gradient(model_dir, str(tmp_path), loss)
    assert reference.keys() == grads[0].keys()
    difference = max((grads[0][name] - value).abs().max().item() for name, value in reference.items())
    print(f"{loss}: FSDP2 fused gradient vs one process unfused: {difference:.2e}")
    assert difference <= 1e-6
    assert all(torch.equal(grads[0][name], grads[1][name]) for name in reference)
    assert min(value.abs().max().item() for value in reference.values()) > 0  # every parameter gets a gradient


@pytest.mark.parametrize("loss", LOSSES)
def test_zero3_step_equals_one_process_on_the_whole_batch(loss, ranks, model_dir, tmp_path):
    """Under ZeRO-3 the engine averages the ranks' gradients (reduce-scatter) and SGD at lr 1 moves
    each parameter by minus that average: one process's unfused gradient of the whole micro-batch.
    float32, fused against unfused: within 1e-6, as under FSDP2, and so is the unfused path under the
    same engine; the ranks hold equal parameters."""
    updates = _outcome(ranks, "zero3", loss, True)
    unfused = _outcome(ranks, "zero3", loss, False)  # TRL's own log-probs under the same engine
    reference = _whole_batch_gradient(model_dir, str(tmp_path), loss)
    assert reference.keys() == updates[0].keys()
    difference = max((updates[0][name] + value).abs().max().item() for name, value in reference.items())
    control = max((unfused[0][name] + value).abs().max().item() for name, value in reference.items())
    print(f"{loss}: ZeRO-3 update + one process's unfused gradient: fused {difference:.2e}, unfused {control:.2e}")
    assert difference <= 1e-6 and control <= 1e-6
    assert all(torch.equal(updates[0][name], updates[1][name]) for name in reference)
    assert min(value.abs().max().item() for value in reference.values()) > 0  # every parameter gets a gradient


pytestmark = pytest.mark.filterwarnings(LIGER_DEPRECATED)
