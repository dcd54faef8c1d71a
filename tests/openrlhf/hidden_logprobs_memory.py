"""Peak memory of OpenRLHF's actor training step with and without ``GMPO_OPENRLHF_HIDDEN_LOGPROBS=1``.

    python -m tests.openrlhf.hidden_logprobs_memory [--vocab 151936] [--rows 4] [--length 512] [--zero3]

OpenRLHF 0.11.2's own ``ActorPPOTrainer.training_step`` (the ``tests.openrlhf.tiny`` harness: the
real trainer, arguments from gmpo-openrlhf's parser, a stand-in strategy whose backward is
``loss.backward()`` and an SGD step) on a tiny Llama (hidden size 32, 2 layers, lm_head untied)
with a ``--vocab`` vocabulary, float32, one micro-batch of ``--rows`` sequences of ``--length``
tokens (16 prompt tokens each, the responses of different lengths), gmpo with the KL loss.
The step runs once with OpenRLHF's ``Actor.forward`` and once, on a second actor with the same
weights, with the hidden-state forward; each under ``torch.profiler`` with ``profile_memory=True``,
the allocation and free events of torch's CPU allocator summed in time order
(``gmpo_plugins.bench.measure``): the peak bytes above those allocated when the step started.
With ``--zero3`` the actor's model is wrapped as OpenRLHF's strategy wraps it under ``--ds.zero_stage 3``:
a DeepSpeed ZeRO-3 engine (``deepspeed.initialize`` with OpenRLHF's ``get_train_ds_config``, float32, in
this one process on gloo, world size 1) that partitions every parameter above DeepSpeed's persistence
threshold (the lm_head's 152K x 32 among them: checked empty outside its calls), the strategy
stand-in's backward and step being the engine's (``engine.backward``, ``engine.step``) and the
optimizer a torch SGD.
Prints a Markdown table, its command and machine first.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from unittest.mock import patch

import torch

from gmpo_plugins.adapters.openrlhf import install
from gmpo_plugins.adapters.openrlhf.hidden_logprobs import hidden_state_forward
from gmpo_plugins.bench import measure

ARGV = [
    "--actor.policy_loss_type", "gmpo", "--actor.eps_clip_low_high", "0.4", "0.4", "--algo.kl.use_loss",
    "--actor.loss_agg_mode", "seq-mean-token-mean",
]  # fmt: skip
PROMPT = 16


def _actor(vocab: int, length: int):
    from openrlhf.models import Actor

    from tests.tiny_models import tiny_model

    path = tempfile.mkdtemp(prefix="tiny-llama-")
    model = tiny_model("llama", vocab, seed=0, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model.config.max_position_embeddings = max(length, model.config.max_position_embeddings)
    model.save_pretrained(path)
    actor = Actor(path, attn_implementation="sdpa", param_dtype="bf16")
    actor.model.float()
    return actor


def _samples(rows: int, length: int) -> list[tuple[int, int, float]]:
    """(prompt, response, advantage) per row: responses from ``length - 16`` down, both signs."""
    response = length - PROMPT
    return [(PROMPT, response - (i * response) // (2 * rows), 1.0 if i % 2 else -0.5) for i in range(rows)]


def _zero3(actor, strategy, rows: int) -> None:
    """``actor.model`` becomes a DeepSpeed ZeRO-3 engine; ``strategy`` backward and step through it."""
    import deepspeed
    from openrlhf.utils.deepspeed.deepspeed_utils import get_train_ds_config

    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29571"), ("RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    config = get_train_ds_config(offload=False, adam_offload=False, stage=3, param_dtype="fp32", max_norm=0, zpg=1)
    config.update(train_micro_batch_size_per_gpu=rows, train_batch_size=rows, zero_allow_untested_optimizer=True)
    optimizer = torch.optim.SGD(actor.model.parameters(), lr=1e-2)
    engine, *_ = deepspeed.initialize(model=actor.model, optimizer=optimizer, config=config)
    head = engine.module.get_output_embeddings().weight
    if head.numel() != 0:  # partitioned: empty outside the calls that gather it
        raise SystemExit(f"ZeRO-3 left the lm_head whole ({head.numel()} of {head.ds_numel} elements)")
    actor.model = engine
    strategy.backward = lambda loss, model, optimizer, **kwargs: engine.backward(loss)
    strategy.optimizer_step = lambda optimizer, model, scheduler, name="model", **kwargs: engine.step()


def step_peak(vocab: int, rows: int, length: int, hidden: bool, zero3: bool = False) -> tuple[int, float]:
    """(peak extra bytes of one training_step, its logged policy_loss)."""
    import openrlhf.models.actor as actor_module

    from tests.openrlhf import tiny

    args = tiny.build_args([*ARGV, *tiny.GROUP_ARGS])
    actor = _actor(vocab, length)
    trainer, strategy = tiny.build_trainer(args, actor)
    if zero3:
        _zero3(actor, strategy, rows)
    with patch.object(tiny, "SAMPLES", _samples(rows, length)):
        experience = tiny.build_experience(actor)
    info = tiny.loss_batch_info(strategy, experience)
    status: dict = {}

    def step() -> None:
        status.update(trainer.training_step(experience, kl_ctl=0.01, step=0, loss_batch_info=info))

    forward = hidden_state_forward(actor_module.Actor.forward) if hidden else actor_module.Actor.forward
    with patch.object(actor_module.Actor, "forward", forward):
        peak = measure.peak_extra_bytes(step, torch.device("cpu"), 0)
    if peak is None:
        raise SystemExit("torch's profiler gave no memory events")
    return peak, float(torch.as_tensor(status["metrics"]["policy_loss"]).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--zero3", action="store_true", help="the actor under a DeepSpeed ZeRO-3 engine")
    args = parser.parse_args()
    torch.set_num_threads(1)
    install()  # the PolicyLoss patch (registry losses), before OpenRLHF is imported
    plain, plain_loss = step_peak(args.vocab, args.rows, args.length, hidden=False, zero3=args.zero3)
    hidden, hidden_loss = step_peak(args.vocab, args.rows, args.length, hidden=True, zero3=args.zero3)
    logits = args.rows * args.length * args.vocab * 4
    print(
        f"Command: `python -m tests.openrlhf.hidden_logprobs_memory --vocab {args.vocab} --rows {args.rows} "
        f"--length {args.length}{' --zero3' * args.zero3}`\n"
    )
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} (1 thread); "
        f"one (B, T, V) float32 logits tensor: {logits / 2**20:.0f} MiB\n"
    )
    print("| actor forward | peak extra memory of training_step (MiB) | x OpenRLHF's | policy_loss |")
    print("|---|---|---|---|")
    print(f"| OpenRLHF's (logits) | {plain / 2**20:.0f} | 1.000 | {plain_loss:.6f} |")
    print(f"| GMPO_OPENRLHF_HIDDEN_LOGPROBS=1 | {hidden / 2**20:.0f} | {hidden / plain:.3f} | {hidden_loss:.6f} |")


if __name__ == "__main__":
    main()
