"""``RegistryGRPOTrainer``: trl.GRPOTrainer with a registry loss as its policy loss.

``_compute_loss`` is overridden. The per-token log-probs come from GRPOTrainer's own
``_get_per_token_logps_and_entropies`` (TRL's fused LM head, logits / temperature), so
the model forward path is TRL's; generation, rewards, advantages, reference model, vLLM,
logging and checkpointing are inherited unchanged, except that when the loss reads rewards
(``LossSpec.inputs_for``: ``topr``, ``nll_coef``) ``_calculate_rewards`` keeps the rewards
TRL gathered and ``_generate_and_score_completions`` adds this process's totals to the batch
it returns as ``"rewards"`` (B,), and when it reads groups (``real``) each row's group as
``"group_ids"`` (B,); TRL's own shuffle and split then carry them with the other per-sample
tensors. Per micro-batch:

    mask         = completion_mask (* tool_mask)                       (B, T)
    log_probs    = TRL's per-token log-probs of the completion         (B, T)
    old          = inputs["old_per_token_logps"], or log_probs.detach() when TRL skipped
                   it (num_iterations == 1 and steps_per_generation <= accumulation), as TRL does
    advantages   = inputs["advantages"]                                (B,)
    ref          = inputs["ref_per_token_logps"] when beta != 0
    rho          = inputs["importance_sampling_ratio"] with vLLM IS correction:
                   (B, T) in token_* modes, (B, 1) -> (B,) in sequence_* modes
    entropy      = TRL's per-token entropies of the same forward (B, T), differentiable,
                   when the loss terms read them (entropy_coef, top_entropy_quantile)
    rewards      = inputs["rewards"] (B,): sum_k w_k r_k over TRL's reward functions with
                   its reward_weights (NaN skipped, as TRL's nansum: 0 for a completion no
                   function scored, whose advantage TRL sets to 0), when the loss reads them
    group_ids    = inputs["group_ids"] (B,): the row's prompt group (its global row // G, as TRL
                   groups the rows for its advantages), when the loss reads them (``real``, which
                   gets whole groups only: TRL's settings that cut a group are refused)
    loss         = get_loss(name)(LossInputs(...), trl_batch_info(...), **hparams).loss
                   (+ router_aux_loss_coef * aux_loss / G for MoE models, as GRPOTrainer)

With ``use_liger_kernel=True`` (TRL's switch, which also applies Liger's layer kernels through
transformers) the log-probs are not computed first: the backbone's last hidden states at the
positions that predict the completion and the ``lm_head`` weight go to
``gmpo_plugins.fused_linear_loss``, which calls the same registry loss without the
(B, T, V) logits (``old`` missing: the current log-probs, detached, as above; rewards as
above; no entropy: ``options`` refuses the terms that read it). That call runs
inside the prepared model's own forward, through TRL's ``_ForwardRedirection`` (as TRL's
distillation loss runs its chunked head): DDP arms its gradient all-reduce and FSDP gathers the
root-owned parameters (embedding, ``lm_head``) exactly as for the unfused path's forward.
Under DeepSpeed ZeRO-3 the engine marks every module as in its forward for the duration of its
own, so reading the partitioned ``lm_head`` weight there gathers it and registers it as an
external parameter of the running module (DeepSpeed's automated discovery of external
parameters), which DeepSpeed then gathers again for the backward pass and whose gradient it
reduce-scatters as for any other parameter.
The switch is kept next to TRL's own chunked head because that head is not as good on CPU (1.26x
the time and 14x the extra memory of ``fused_linear_loss`` at V = 152K, H = 1024, 4096 positions:
``gmpo-plugins bench --fused-linear``, docs/performance.md).

The first training step proves, before its backward pass, that the loss TRL back-propagates
is the registry's (``proof``), and a TRL outside the tested range warns once (``upstream``).

Hyper-parameters and refusals: ``options``; normalisation: ``normalisation``; metric
names: ``metrics``. No loss math here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import torch
from accelerate.utils import is_peft_model
from trl import GRPOConfig, GRPOTrainer
from trl.models.utils import _ForwardRedirection
from trl.trainer.utils import get_config_model_id

from gmpo_plugins.adapters._common import value_checks_enabled
from gmpo_plugins.adapters.trl.metrics import global_masked_mean, log_loss_metrics
from gmpo_plugins.adapters.trl.normalisation import trl_batch_info
from gmpo_plugins.adapters.trl.options import WHOLE_GROUPS, UnsupportedTRLOptionError, loss_hparams_from_args
from gmpo_plugins.adapters.trl.proof import LossProof
from gmpo_plugins.adapters.upstream import TESTED, UpstreamDriftError, framework_version, warn_if_untested
from gmpo_plugins.core.fused_linear import FusedLinearOutput, fused_linear_loss
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput

# Inputs GRPOTrainer forwards to the model next to input_ids/attention_mask (multimodal).
FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
SEQUENCE_IS_MODES = ("sequence_mask", "sequence_truncate")


class RegistryGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose policy loss is the registry loss ``loss`` (module docstring).

    loss          registry name (``gmpo-plugins list``); unknown names raise
                  UnknownLossError listing the valid ones
    loss_hparams  extra hyper-parameters of that loss (not eps_low/eps_high/kl_beta/
                  norm_length, which come from GRPOConfig.epsilon/epsilon_high/beta/
                  max_completion_length)

    GRPOConfig options the loss cannot honour raise UnsupportedTRLOptionError here, before
    the model is loaded. All other arguments are GRPOTrainer's, in its order.
    """

    _tag_names = ["trl", "grpo", "gmpo-plugins"]

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: GRPOConfig | None = None,
        *positional: Any,
        loss: str = "gmpo",
        loss_hparams: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = GRPOConfig(f"{model_name.split('/')[-1]}-{loss}")
        warn_if_untested("trl")
        self.loss_spec = get_loss(loss)
        self.loss_hparams = loss_hparams_from_args(args, self.loss_spec, loss_hparams)
        self._optional_inputs = frozenset(self.loss_spec.inputs_for(self.loss_hparams))
        self._gathered_rewards: torch.Tensor | None = None
        self._proof: LossProof | None = None
        self._loss_proven = False
        super().__init__(model, reward_funcs, args, *positional, **kwargs)
        if self.loss_hparams.get("entropy_coef", 0.0) != 0.0:
            # TRL 1.14 returns differentiable entropies only where its own bonus is on
            # (_entropy_bonus_enabled, from GRPOConfig.entropy_coef); the registry's bonus needs them
            # whatever TRL's own setting. TRL 1.15+ reads the flag only in its _compute_loss, replaced here.
            self._entropy_bonus_enabled = True
        if args.use_liger_kernel and self.aux_loss_enabled:
            raise UnsupportedTRLOptionError(
                "use_liger_kernel=True with a MoE router auxiliary loss (output_router_logits): the fused-linear "
                "path does not compute it; set use_liger_kernel=False"
            )

    def _rollout_is_weights(self, inputs: Mapping[str, Any]) -> torch.Tensor | None:
        """TRL's vLLM importance-sampling ratio in the core's layout, or None."""
        if not (self.use_vllm and self.vllm_importance_sampling_correction):
            return None
        ratio = inputs["importance_sampling_ratio"]
        return ratio.squeeze(-1) if self.vllm_importance_sampling_mode in SEQUENCE_IS_MODES else ratio

    def _reads(self, name: str) -> bool:
        """Whether the loss, with its hyper-parameters, reads the optional input ``name`` (decided
        once: the hyper-parameters are fixed for the run)."""
        return name in self._optional_inputs

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        """GRPOTrainer's rewards per function (N, K), gathered from every process; kept for
        ``_generate_and_score_completions`` when the loss reads rewards."""
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._reads("rewards"):
            self._gathered_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """GRPOTrainer's batch, with ``"rewards"`` (B,) when the loss reads rewards: this
        process's rows of sum_k w_k r_k (NaN skipped, as TRL's own total); and ``"group_ids"``
        (B,) when it reads groups: global row // G, the groups of G consecutive completions
        over the processes' rows in order in which TRL normalises the advantages (G =
        num_generations, num_generations_eval in evaluation)."""
        output = super()._generate_and_score_completions(inputs)
        rows = output["advantages"].size(0)
        start = self.accelerator.process_index * rows
        gathered, self._gathered_rewards = self._gathered_rewards, None
        if gathered is not None:
            weights = self.reward_weights.to(gathered.device)
            output["rewards"] = (gathered * weights.unsqueeze(0)).nansum(dim=1)[start : start + rows]
        if self._reads("group_ids"):
            rows_index = torch.arange(start, start + rows, device=output["advantages"].device)
            output["group_ids"] = rows_index // self._group_size()
        return output

    def _group_size(self) -> int:
        """G: the completions TRL generates per prompt in the current mode."""
        return self.num_generations if self.model.training else self.num_generations_eval

    def _group_ids(self, inputs: Mapping[str, Any]) -> torch.Tensor | None:
        """The micro-batch's ``"group_ids"`` when the loss reads them, else None. A split-dependent
        loss (``real``) gets whole groups only: UnsupportedTRLOptionError otherwise (the settings
        that cut groups in training are refused before the model loads: ``options``)."""
        if not self._reads("group_ids"):
            return None
        groups = inputs["group_ids"]
        if not self.loss_spec.split_invariant:
            size = self._group_size()
            counts = torch.unique(groups, return_counts=True)[1]
            if bool((counts != size).any()):
                mode, field = ("train", "num_generations") if self.model.training else ("eval", "num_generations_eval")
                raise UnsupportedTRLOptionError(
                    f"gmpo_plugins: loss {self.loss_spec.name!r} {WHOLE_GROUPS}; this {mode} micro-batch holds "
                    f"{int(counts.min())} of a group's {size} completions: set per_device_{mode}_batch_size to a "
                    f"multiple of {field}={size}"
                )
        return groups

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        """GRPOTrainer's training step; the first one also proves, before its backward pass, that
        it back-propagates the registry loss (``proof``: UpstreamDriftError naming the TRL
        version otherwise). For that step only, this trainer's ``accelerator.backward`` checks
        the tensor it is given first."""
        if self._loss_proven:
            return super().training_step(model, inputs, num_items_in_batch)
        proof = self._proof = LossProof(self.loss_spec.name)
        backward, own = self.accelerator.backward, vars(self.accelerator).get("backward")

        def checked_backward(loss: torch.Tensor, **kwargs: Any) -> None:
            proof.check(loss)
            backward(loss, **kwargs)

        self.accelerator.backward = checked_backward
        try:
            output = super().training_step(model, inputs, num_items_in_batch)
        finally:
            self._proof = None
            if own is None:
                del self.accelerator.backward  # the class's method again
            else:
                self.accelerator.backward = own
        proof.verify()
        self._loss_proven = True
        return output

    def _compute_loss(self, model: Any, inputs: Mapping[str, Any]) -> torch.Tensor:
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]

        mode = "train" if self.model.training else "eval"
        training = mode == "train"
        accumulation = self.current_gradient_accumulation_steps if training else 1
        batch = trl_batch_info(
            local_sequences=completion_ids.size(0),
            accumulation_steps=accumulation,
            num_processes=self.accelerator.num_processes,
            num_items_in_batch=inputs["num_items_in_batch"],
            steps_per_generation=self.args.steps_per_generation,
            training=training,
        )
        if self.args.use_liger_kernel:
            out, entropies = self._fused_linear_loss(model, inputs, input_ids, attention_mask, mask, batch)
            aux_loss = None
        else:
            per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                completion_ids.size(1),
                compute_entropy=True,
                compute_aux_loss=self.aux_loss_enabled,
                **{key: inputs.get(key) for key in FORWARD_KEYS},
            )
            bonus = self.loss_hparams.get("entropy_coef", 0.0) != 0.0
            if bonus and torch.is_grad_enabled() and not entropies.requires_grad:
                raise UpstreamDriftError(
                    f"gmpo_plugins: {framework_version('trl')} returned entropies without a gradient, so the "
                    f"registry's entropy bonus (entropy_coef={self.loss_hparams['entropy_coef']}) would change the "
                    f"loss and not the update (the adapter is tested with trl{TESTED['trl'].specifier})"
                )
            old_per_token_logps = inputs.get("old_per_token_logps")
            if old_per_token_logps is None:
                old_per_token_logps = per_token_logps.detach()
            out = self.loss_spec(
                LossInputs(
                    log_probs=per_token_logps,
                    old_log_probs=old_per_token_logps,
                    advantages=inputs["advantages"],
                    mask=mask,
                    ref_log_probs=inputs["ref_per_token_logps"] if self.beta != 0.0 else None,
                    rollout_is_weights=self._rollout_is_weights(inputs),
                    rewards=inputs["rewards"] if self._reads("rewards") else None,
                    entropy=entropies if self._reads("entropy") else None,
                    group_ids=self._group_ids(inputs),
                ),
                batch,
                validate=value_checks_enabled(f"trl:{self.loss_spec.name}"),
                **self.loss_hparams,
            )
        loss = out.loss
        if self._proof is not None:
            self._proof.watch(out.loss)
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss / accumulation
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

        store = self._metrics[mode]
        store["entropy"].append(global_masked_mean(self.accelerator, entropies, mask))
        metrics = {key: value for key, value in out.metrics.items() if key != "entropy"}
        log_loss_metrics(store, self.accelerator, metrics, mask, accumulation)
        return loss

    def _fused_linear_loss(
        self,
        model: Any,
        inputs: Mapping[str, Any],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mask: torch.Tensor,
        batch: BatchInfo,
    ) -> tuple[LossOutput, torch.Tensor]:
        """The registry loss from the backbone's hidden states and the lm_head (module
        docstring), and the (B, T) entropies, computed inside ``model``'s forward (``model``:
        the prepared model, a DDP wrapper, an FSDP module or the model itself).

        The loss tensor leaves the wrapper's forward as a tensor output of its own, so DDP finds
        it (its unused-parameter search and backward hooks) and the returned loss is that output.
        The arguments reach the call by closure, not through the wrapper's forward, which would
        move or cast them (FSDP's mixed precision casts floating inputs)."""
        unwrapped = self.accelerator.unwrap_model(model)
        call = functools.partial(self._hidden_state_loss, unwrapped, inputs, input_ids, attention_mask, mask, batch)
        loss, out = _ForwardRedirection()(model, unwrapped, call)
        return dataclasses.replace(out, loss=loss), out.entropy

    def _hidden_state_loss(
        self,
        unwrapped: Any,
        inputs: Mapping[str, Any],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mask: torch.Tensor,
        batch: BatchInfo,
    ) -> tuple[torch.Tensor, FusedLinearOutput]:
        """(loss, output) of ``fused_linear_loss`` on the backbone's last hidden states and the
        lm_head of the unwrapped model (run inside the prepared model's forward:
        ``_fused_linear_loss``)."""
        if is_peft_model(unwrapped):
            unwrapped = unwrapped.base_model.model
        forward = {key: inputs[key] for key in FORWARD_KEYS if inputs.get(key) is not None}
        length = inputs["completion_ids"].size(1)
        backbone = getattr(unwrapped, unwrapped.base_model_prefix)
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **forward)
        hidden = hidden.last_hidden_state[:, -length - 1 : -1]  # position t predicts completion token t
        head = unwrapped.get_output_embeddings()
        out = fused_linear_loss(
            self.loss_spec,
            hidden.to(head.weight.dtype),
            head.weight,
            inputs["completion_ids"],
            inputs.get("old_per_token_logps"),
            inputs["advantages"],
            mask,
            batch,
            bias=head.bias,
            ref_log_probs=inputs["ref_per_token_logps"] if self.beta != 0.0 else None,
            rollout_is_weights=self._rollout_is_weights(inputs),
            rewards=inputs["rewards"] if self._reads("rewards") else None,
            group_ids=self._group_ids(inputs),
            temperature=self.temperature,
            validate=value_checks_enabled(f"trl:{self.loss_spec.name}"),
            **self.loss_hparams,
        )
        return out.loss, out
