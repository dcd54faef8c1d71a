"""Run OpenRLHF 0.11.2's own ``ActorPPOTrainer.training_step`` on CPU (test helper).

Real OpenRLHF code: the arguments (train_ppo_ray's own parser and ``__main__`` block, up to
``train(args)``, as ``gmpo-openrlhf`` runs them: ``cli.train_args``), the
``Actor`` loaded from a tiny random Llama saved to a temp dir (attn_implementation="sdpa"),
``ActorPPOTrainer.__init__`` (which builds PolicyLoss from the arguments) and
``training_step``, the Experience batch built per sample as ``samples_generator`` does and
batched by the replay buffer's functions, and the loss normalisation from
``iter_grad_accum_global_norm``.
Stand-ins: the strategy (DeepspeedStrategy needs CUDA and torch.distributed), and during
``ActorPPOTrainer.__init__`` only, ``torch_dist_barrier_and_cuda_sync`` and
``torch.cuda.current_device`` (called by NaiveReplayBuffer.__init__).
"""

from __future__ import annotations

import math
import tempfile
from unittest.mock import patch

import torch
from openrlhf.models import Actor
from openrlhf.trainer.ppo_utils.experience import (
    Experience,
    make_experience_batch,
    remove_padding_in_sequences,
    split_experience_batch,
)
from openrlhf.trainer.ray import ppo_actor
from openrlhf.utils.loss_utils import iter_grad_accum_global_norm

from gmpo_plugins.adapters.openrlhf.cli import train_args
from tests.tiny_models import tiny_model

VOCAB = 64
# (prompt_len, response_len, advantage): both signs, a zero advantage, an empty response
SAMPLES = [(3, 5, 1.0), (2, 2, -0.5), (4, 7, 0.25), (3, 1, -2.0), (2, 4, -1.0), (3, 6, 0.0), (3, 0, 1.0)]
GROUP_ARGS = ["--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "2"]


def build_args(argv):
    """train_ppo_ray's arguments as ActorPPOTrainer sees them: normalised by train_ppo_ray's own
    ``__main__`` block (``args.actor.eps_clip_low_high`` set, ...), checked as gmpo-openrlhf checks them."""
    return train_args(argv)


class CPUStrategy:
    """Stand-in for DeepspeedStrategy: what training_step touches; backward is loss.backward()."""

    def __init__(self, args):
        self.args = args
        self.accumulated_gradient = 1
        self.ring_attn_group = None
        self.ds_device_mesh = None
        self.last_grads = {}
        self._grad_norm = 0.0

    def backward(self, loss, model, optimizer, **kwargs):
        loss.backward()

    def optimizer_step(self, optimizer, model, scheduler, name="model", **kwargs):
        self.last_grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        self._grad_norm = math.sqrt(sum(float(g.pow(2).sum()) for g in self.last_grads.values()))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    def get_grad_norm(self, model):
        return self._grad_norm

    def is_rank_0(self):
        return True

    def all_reduce(self, data, op="mean"):
        return data


def build_actor(seed=0):
    """OpenRLHF's ``Actor`` loaded from a random tiny Llama (``tests.tiny_models``) saved to a temp dir, float32."""
    path = tempfile.mkdtemp(prefix="tiny-llama-")
    tiny_model("llama", VOCAB, seed=seed, pad_token_id=0, bos_token_id=1, eos_token_id=2).save_pretrained(path)
    actor = Actor(path, attn_implementation="sdpa", param_dtype="bf16")  # the from_pretrained path
    actor.model.float()  # exact fp32 arithmetic on CPU
    return actor


def build_trainer(args, actor, lr=1e-2):
    strategy = CPUStrategy(args)
    optim = torch.optim.SGD(actor.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda _: 1.0)
    with (
        patch.object(ppo_actor, "torch_dist_barrier_and_cuda_sync", lambda: None),
        patch.object(torch.cuda, "current_device", lambda: 0),
    ):
        trainer = ppo_actor.ActorPPOTrainer(
            strategy,
            actor,
            ema_model=None,
            actor_optim=optim,
            actor_scheduler=sched,
            micro_train_batch_size=args.train.micro_batch_size,
            tokenizer=None,
            eps_clip=args.actor.eps_clip,
            ema_beta=args.train.ema_beta,
            vllm_engines=None,
        )
    return trainer, strategy


def build_experience(actor, seed=0, noise=0.3):
    """One Experience batch: full-length int64 action_mask (B, T-1), per-token advantages
    (B, T-1) constant over a row's response (group estimators), old log-probs = the actor's
    own plus N(0, noise), reference log-probs for the KL loss."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for p_len, r_len, adv in SAMPLES:
        total = p_len + r_len
        action_mask = torch.zeros(total, dtype=torch.long)
        action_mask[p_len:total] = 1
        items.append(
            Experience(
                sequences=torch.randint(3, VOCAB, (1, total), generator=g),
                attention_mask=torch.ones(1, total, dtype=torch.long),
                action_mask=action_mask[1:].unsqueeze(0),
                response_length=torch.tensor([r_len]),
                truncated=torch.tensor([False]),
                total_length=torch.tensor([float(total)]),
                rewards=torch.tensor([adv]),
                info={"reward": torch.tensor([adv]), "response_clip_ratio": torch.tensor([False])},
                prompts=["p"],
                labels=["l"],
            )
        )
    batch = Experience.concat_experiences(items, pad_token_id=0)
    actor.eval()
    with torch.no_grad():
        logp = actor(batch.sequences, batch.action_mask, attention_mask=batch.attention_mask)
    mask = batch.action_mask.float()
    perturbation = noise * torch.randn(logp.shape, generator=g)
    batch.action_log_probs = (logp + perturbation) * mask
    batch.base_action_log_probs = (logp + 0.5 * perturbation) * mask
    batch.rollout_log_probs = None
    batch.advantages = batch.rewards.float().unsqueeze(-1) * mask
    batch.returns = batch.advantages.clone()
    return make_experience_batch(remove_padding_in_sequences(split_experience_batch(batch)), packing_samples=False)


def loss_batch_info(strategy, experience):
    """OpenRLHF's own normalisers for one optimizer step made of this one micro-batch."""
    [(_, info)] = list(iter_grad_accum_global_norm([experience], strategy, 1, lambda e: e.action_mask))
    return info
