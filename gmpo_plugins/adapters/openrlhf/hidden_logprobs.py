"""OpenRLHF's actor log-probs from the last hidden states and the lm_head, without the logits.

Opt-in: ``GMPO_OPENRLHF_HIDDEN_LOGPROBS=1`` in the environment of ``gmpo-openrlhf`` (off by
default). OpenRLHF's ``Actor.forward`` (``openrlhf/models/actor.py``) computes the (B, T, V)
logits, casts them to float32 and takes ``log_probs_from_logits``; with the setting, a log-prob
call (``action_mask`` given, or ``return_logprobs``) of every ``Actor`` in the process runs the
backbone instead and, for the A scored positions of each row (A = ``action_mask.shape[1]``, or
T - 1 without it), with h (B, A, H) the hidden states at positions T-1-A .. T-2, W the
``lm_head`` weight (V, H), b its bias, y the next tokens and tau the actor's ``temperature``
(OpenRLHF's ``--rollout.temperature``):

    z          = float32(h W^T + b) / tau                 chunk by chunk (``default_chunk_size``)
    log_p      = z_y - logsumexp(z)                        (B, A), differentiable into h, W, b
    entropy    = logsumexp(z) - sum softmax(z) z           (B, A), no gradient (a metric)

through ``core.fused_linear.ChunkedLogProbs`` (two passes: at most one chunk of logits exists).
The result is OpenRLHF's: ``log_p * action_mask``, and with ``return_output`` an output object
whose ``entropy`` is (B, T - 1), the last A columns filled. It is computed by a call of ``Actor.model``
(DeepSpeed's engine, as OpenRLHF calls it) whose causal LM's ``forward`` is replaced for the call by
the backbone and a call of the ``lm_head`` module whose ``forward`` is replaced by the chunked
log-probs, so the engine's forward and the module hooks run as for OpenRLHF's own forward. That
covers the training forward (``ActorPPOTrainer.training_step``), the old-log-prob forward
(``PolicyModelActor.forward``) and the reference forward (``ReferenceModelActor.forward``, whose
model is an ``Actor`` too), in every Ray worker: ``hook`` installs the patch where it patches
PolicyLoss, and ``runtime_env`` passes the setting to the workers. Calls for the logits alone keep OpenRLHF's forward.

What the path cannot honour is refused, naming the flag (``check_args``, at parse time, and again
in the forward): a non-zero ``--actor.entropy_coef`` (the entropy has no gradient here),
packed samples (``--ds.packing_samples``, which OpenRLHF also turns on for ``--train.dynamic_batch_enable``
and ``--ds.ring_attn_size`` > 1: refused at parse time, on the arguments as OpenRLHF normalised
them), ``--actor.aux_loss_coef`` > 0 (the MoE router loss comes from the logits' forward), a
vision-language actor, and a head that is not a plain ``torch.nn.Linear`` or a model that
scales or soft-caps its logits.

DeepSpeed ZeRO-3 (``--ds.zero_stage 3``) is supported: the chunked log-probs run as a call of the
``lm_head`` module inside the engine's forward (``_head_call``), so DeepSpeed's own module hooks gather
its partitioned weight for the forward and again for the backward, as for the module's own forward.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

ENV = "GMPO_OPENRLHF_HIDDEN_LOGPROBS"
_PATCHED = "__gmpo_plugins_hidden_logprobs__"
_log = logging.getLogger(__name__)


class HiddenLogProbsError(ValueError):
    """A setting or input the hidden-state log-prob path cannot honour (message names it)."""


def enabled() -> bool:
    """True when ``GMPO_OPENRLHF_HIDDEN_LOGPROBS`` is "1"; unset, "" or "0": False."""
    value = os.environ.get(ENV, "").strip()
    if value not in ("", "0", "1"):
        raise HiddenLogProbsError(f"{ENV}: expected 1 (on) or 0 / unset (off), got {value!r}")
    return value == "1"


def refusals(args: Any) -> list[str]:
    """The train_ppo_ray flags that the path cannot honour, each with why; ``args`` as train_ppo_ray's
    ``train(args)`` receives them (nested, after OpenRLHF's normalisation, which turns
    ``--ds.packing_samples`` on for ``--train.dynamic_batch_enable`` and ``--ds.ring_attn_size`` > 1)."""
    found = []
    if args.actor.entropy_coef not in (None, 0, 0.0):
        found.append(
            f"--actor.entropy_coef {args.actor.entropy_coef}: the entropy is a metric without gradient on "
            "this path (use 0 or leave it unset)"
        )
    ring = args.ds.ring_attn_size or 1
    if args.ds.packing_samples:
        turned_on_by = (
            ("--train.dynamic_batch_enable", args.train.dynamic_batch_enable),
            (f"--ds.ring_attn_size {ring}", ring > 1),
        )
        causes = [flag for flag, on in turned_on_by if on]
        why = f" (OpenRLHF turns it on for {', '.join(causes)})" if causes else ""
        found.append(f"--ds.packing_samples{why}: packed rows are not supported")
    if ring > 1:
        found.append(f"--ds.ring_attn_size {ring}: ring attention is not supported")
    if (args.actor.aux_loss_coef or 0) > 0:
        found.append(
            f"--actor.aux_loss_coef {args.actor.aux_loss_coef}: the MoE router loss is not computed on this path"
        )
    return found


def check_args(args: Any) -> None:
    """With the setting on, HiddenLogProbsError naming every flag it cannot honour (``args``: as for ``refusals``)."""
    if not enabled():
        return
    found = refusals(args)
    if found:
        raise HiddenLogProbsError(f"{ENV}=1 cannot honour: " + "; ".join(found))


def runtime_env(env: dict[str, Any]) -> dict[str, Any]:
    """``env`` (a Ray runtime env) with the setting in its ``env_vars`` when it is on here."""
    if not enabled():
        return env
    return {**env, "env_vars": {**(env.get("env_vars") or {}), ENV: "1"}}


def _parts(model: Any) -> tuple[Any, Any, Any]:
    """(causal LM, backbone, lm_head) of the Hugging Face causal LM inside OpenRLHF's ``Actor.model``
    (which OpenRLHF's DeepSpeed strategy replaces by the engine that wraps it)."""
    import torch

    while isinstance(getattr(model, "module", None), torch.nn.Module):  # DeepSpeed's engine (OpenRLHF's strategy)
        model = model.module
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT
    head = base.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        raise HiddenLogProbsError(
            f"{ENV}=1: the lm_head must be a torch.nn.Linear, got {type(head).__name__} (a LoRA-adapted or "
            "quantised head is not supported)"
        )
    config = base.config.get_text_config()
    for name in ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier"):
        if getattr(config, name, None) not in (None, 1, 1.0):
            raise HiddenLogProbsError(f"{ENV}=1: the model's {name} = {getattr(config, name)} is not supported")
    return base, getattr(base, base.base_model_prefix), head


@contextlib.contextmanager
def _forward_replaced(module: Any, forward: Callable[..., Any]) -> Iterator[None]:
    """``module(...)`` calls ``forward`` while active (an instance attribute over the class's ``forward``);
    the module's own hooks, and those of whatever wraps it, run around it as around its own forward."""
    own = module.__dict__.get("forward")
    module.forward = forward
    try:
        yield
    finally:
        if own is None:
            del module.forward
        else:
            module.forward = own


_announced: list[str] = []


def _announce(name: str) -> None:
    """One line per process, at the first log-prob call on this path."""
    _announced.append(name)
    _log.warning(
        "gmpo_plugins: %s=1: %s log-probs from the hidden states and the lm_head (pid %d)", ENV, name, os.getpid()
    )


def hidden_state_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Actor.forward`` with log-prob calls computed from the hidden states (module docstring)."""

    @functools.wraps(original)
    def forward(
        self: Any,
        sequences: Any,
        action_mask: Any = None,
        attention_mask: Any = None,
        return_output: bool = False,
        allgather_logits: bool = False,
        return_logprobs: bool = False,
        ring_attn_group: Any = None,
        packed_seq_lens: Any = None,
        return_entropy: bool = False,
        **mm_inputs: Any,
    ) -> Any:
        if action_mask is None and not return_logprobs:  # the logits are asked for: OpenRLHF's forward
            return original(
                self, sequences, action_mask, attention_mask, return_output, allgather_logits, return_logprobs,
                ring_attn_group, packed_seq_lens, return_entropy, **mm_inputs,
            )  # fmt: skip
        if self.packing_samples or ring_attn_group is not None:
            raise HiddenLogProbsError(f"{ENV}=1: --ds.packing_samples and --ds.ring_attn_size > 1 are not supported")
        if mm_inputs or getattr(self, "is_vlm", False):
            raise HiddenLogProbsError(f"{ENV}=1: a vision-language actor is not supported")
        if not _announced:
            _announce(type(self).__name__)
        return _log_probs(self, sequences, action_mask, attention_mask, return_output, return_entropy)

    setattr(forward, _PATCHED, True)
    return forward


def _log_probs(
    actor: Any, sequences: Any, action_mask: Any, attention_mask: Any, return_output: bool, return_entropy: bool
) -> Any:
    """The log-probs (and entropies) of ``Actor.forward``, computed by a call of ``actor.model`` (DeepSpeed's
    engine under OpenRLHF's strategy) whose causal LM runs the backbone and ``_head_call`` instead of its
    own forward: the engine's forward and every module hook run as for OpenRLHF's own call."""
    import torch

    batch, length = sequences.shape
    position_ids = attention_mask.long().cumsum(-1) - 1  # as Actor.forward
    position_ids.masked_fill_(attention_mask == 0, 1)
    causal_lm, backbone, head = _parts(actor.model)
    scored = length - 1 if action_mask is None else action_mask.shape[1]
    targets = sequences[:, length - scored :].reshape(batch * scored)  # position t predicts token t + 1

    def hidden_state_log_probs(input_ids: Any, attention_mask: Any = None, position_ids: Any = None, **extra: Any):
        passed = sorted(name for name, value in extra.items() if value is not None)
        if passed:
            raise HiddenLogProbsError(f"{ENV}=1: the model was called with {passed}, which this path does not pass on")
        output = backbone(input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
        hidden = output.last_hidden_state[:, length - 1 - scored : length - 1]
        log_p, entropy = _head_call(head, hidden.reshape(batch * scored, -1), targets, float(actor.temperature))
        return log_p.view(batch, scored), entropy.view(batch, scored)

    with _forward_replaced(causal_lm, hidden_state_log_probs):
        log_probs, entropy = actor.model(sequences, attention_mask=attention_mask, position_ids=position_ids)
    if action_mask is not None:
        log_probs = log_probs * action_mask.float()
    if not return_output:
        return log_probs
    output = SimpleNamespace()
    if return_entropy:
        output.entropy = torch.zeros(batch, length - 1, dtype=entropy.dtype, device=entropy.device)
        output.entropy[:, length - 1 - scored :] = entropy
    return log_probs, output


def _head_call(head: Any, hidden: Any, targets: Any, temperature: float) -> Any:
    """(log_p (N,), entropy (N,)) of ``core.fused_linear.ChunkedLogProbs`` for hidden (N, H) and targets (N,),
    run as a call of the ``lm_head`` module itself, its ``forward`` replaced for the call.

    So whatever manages the module's parameters around its own forward manages them here too. Under
    DeepSpeed ZeRO-3 the partitioned weight (and bias) is empty outside the module's calls; the
    hooks DeepSpeed puts on every module gather it before the forward and release it after, gather it
    again when the gradient reaches the call's output (the backward recomputes each chunk of logits
    from the weight) and release it when the gradient leaves through ``hidden``; the weight's gradient
    then reaches its partition as from the module's own forward."""
    import torch

    from gmpo_plugins.core.fused_linear import ChunkedLogProbs, default_chunk_size

    def chunked_log_probs(hidden: Any, targets: Any) -> Any:
        weight = head.weight  # gathered by the module's pre-forward hooks, if any
        positions = hidden.shape[0]
        return ChunkedLogProbs.apply(
            hidden.to(weight.dtype),
            weight,
            head.bias,
            targets,
            torch.ones(positions, dtype=torch.bool, device=hidden.device),
            temperature,
            default_chunk_size(weight.shape[0], positions),
        )

    with _forward_replaced(head, chunked_log_probs):
        return head(hidden, targets)


def patch_actor(module: ModuleType) -> None:
    """Replace ``module.Actor.forward`` (``openrlhf.models.actor``) by ``hidden_state_forward``. Idempotent."""
    actor = module.Actor
    if getattr(actor.forward, _PATCHED, False):
        return
    actor.forward = hidden_state_forward(actor.forward)


def patch_if_enabled() -> None:
    """``patch_actor`` on the imported ``openrlhf.models.actor`` when the setting is on."""
    if enabled():
        import openrlhf.models.actor as module

        patch_actor(module)
