"""CPU stand-in (example, not shipped) for the `vllm` package: vLLM needs CUDA and cannot be installed on a CPU box.

What OpenRLHF 0.11.2 uses of vLLM, and what stands in for it here:
  openrlhf/trainer/ray/vllm_engine.py    `vllm.AsyncEngineArgs(**kwargs)`, `vllm.AsyncLLMEngine.from_engine_args`,
                                         then the engine's async methods (generate, sleep/wake_up, collective_rpc
                                         for the weight sync, ...); `vllm.inputs.TokensPrompt`, `vllm.utils.random_uuid`
  openrlhf/trainer/ppo_utils/samples_generator.py   `SamplingParams(...)`
  openrlhf/utils/distributed_util.py     `vllm.distributed.utils.StatelessProcessGroup`,
                                         `vllm.distributed.device_communicators.pynccl.PyNcclCommunicator`
  openrlhf/trainer/ray/vllm_worker_wrap.py   what `collective_rpc("init_process_group" | "update_weight")` runs

The engine generates with Hugging Face ``generate`` on CPU from the same checkpoint (the dtype OpenRLHF
asks for, bfloat16, computed in float32). Each request is sampled under its own seed, derived from the
engine seed, the prompt's token ids and the sample index (the k-th request for the same prompt), so runs
that differ only in how the actor splits its batch see identical rollouts. The weight sync is OpenRLHF's
own broadcast from the actor's rank 0, over gloo instead of NCCL.

With ``OPENRLHF_E2E_RECORD_DIR`` set (the folder is created when missing), the engine appends every
completion (prompt token ids, sample index, seed, completion token ids) to ``completions.jsonl`` there
and writes its weights, ``{"syncs": n, "state_dict": ...}``, after every complete sync to
``engine_weights.pt``; those of the first sync (the actor after its first training step) are also kept
as ``engine_weights_1.pt`` (tests compare runs' samples, and the engine's weights with the actor's;
``gmpo-plugins frameworks`` reports the first update). Everything of OpenRLHF around it is
real. Never ship this: it lives under examples/openrlhf_cpu/ (outside the package) and is put on PYTHONPATH
only by the OpenRLHF tests and by users running OpenRLHF on CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace

# The version OpenRLHF 0.11.2 pins in its "vllm" extra, so version checks in OpenRLHF
# (ppo_actor.py, vllm_engine.py) take their current-vLLM branch.
__version__ = "0.29.0"

RECORD_DIR_ENV = "OPENRLHF_E2E_RECORD_DIR"


class SamplingParams(SimpleNamespace):
    """vLLM's sampling settings as plain attributes (OpenRLHF deep-copies and edits them)."""


class AsyncEngineArgs(SimpleNamespace):
    """vLLM's engine arguments as plain attributes (model, seed, dtype, ...)."""


@dataclass
class CompletionOutput:
    token_ids: list
    text: str
    finish_reason: str
    logprobs: list | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list
    outputs: list = field(default_factory=list)
    finished: bool = True


@dataclass
class Logprob:
    logprob: float


def request_seed(engine_seed: int, prompt_token_ids: list, sample_index: int) -> int:
    """A 63-bit seed from the engine seed, the prompt's token ids and the sample index."""
    text = f"{engine_seed}|{','.join(map(str, prompt_token_ids))}|{sample_index}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


class _OutputProcessor:
    def get_num_unfinished_requests(self) -> int:
        return 0  # generation completes inside each request


class AsyncLLMEngine:
    """The vLLM async engine API OpenRLHF calls, generating with Hugging Face on CPU."""

    def __init__(self, args: AsyncEngineArgs) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(getattr(args, "dtype", None), torch.float32)
        self.dtype = dtype
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa")
        self.model = model.float().eval()
        self.tokenizer = AutoTokenizer.from_pretrained(args.model)
        self.seed = int(getattr(args, "seed", 0))
        self.output_processor = _OutputProcessor()
        self._samples_per_prompt: dict[tuple, int] = {}
        self._sync_group = None
        self._syncs = 0
        self._sleeping = False

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> AsyncLLMEngine:
        return cls(engine_args)

    async def is_sleeping(self) -> bool:
        return self._sleeping

    async def sleep(self, level: int = 1) -> None:
        self._sleeping = True

    async def wake_up(self, tags: list | None = None) -> None:
        self._sleeping = False

    async def reset_prefix_cache(self) -> None:
        return None

    async def pause_generation(self, mode: str = "keep") -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    def generate(self, prompt: dict, sampling_params: SamplingParams, request_id: str) -> AsyncIterator[RequestOutput]:
        """One completion of ``prompt["prompt_token_ids"]``; its seed is fixed here, in request order."""
        token_ids = list(prompt["prompt_token_ids"])
        key = tuple(token_ids)
        sample_index = self._samples_per_prompt.get(key, 0)
        self._samples_per_prompt[key] = sample_index + 1
        seed = request_seed(self.seed, token_ids, sample_index)
        return self._generate(token_ids, sampling_params, request_id, seed, sample_index)

    async def _generate(self, token_ids: list, params: SamplingParams, request_id: str, seed: int, sample_index: int):
        import torch

        eos = self.model.generation_config.eos_token_id
        top_k = getattr(params, "top_k", -1)
        torch.manual_seed(seed)
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([token_ids]),
                attention_mask=torch.ones(1, len(token_ids), dtype=torch.long),
                do_sample=True,
                temperature=getattr(params, "temperature", 1.0),
                top_p=getattr(params, "top_p", 1.0),
                top_k=top_k if top_k and top_k > 0 else 0,
                max_new_tokens=params.max_tokens,
                min_new_tokens=getattr(params, "min_tokens", 0) or 0,
                eos_token_id=eos,
                pad_token_id=self.model.generation_config.pad_token_id or 0,
                return_dict_in_generate=True,
                output_logits=True,
            )
        new = out.sequences[0, len(token_ids) :].tolist()
        finish_reason = "stop" if new and new[-1] == eos else "length"
        logprobs = None
        if getattr(params, "logprobs", None) is not None:
            rows = [torch.log_softmax(logits[0].float(), -1) for logits in out.logits]
            logprobs = [{tok: Logprob(float(row[tok]))} for tok, row in zip(new, rows, strict=True)]
        self._record_completion({"prompt": token_ids, "sample": sample_index, "seed": seed, "completion": new})
        text = self.tokenizer.decode(new, skip_special_tokens=getattr(params, "skip_special_tokens", False))
        yield RequestOutput(request_id, token_ids, [CompletionOutput(new, text, finish_reason, logprobs)])

    async def collective_rpc(self, method: str, args: tuple = ()) -> list:
        """What vLLM's workers run for OpenRLHF's ``WorkerWrap`` (one worker: tensor parallel size 1)."""
        return [getattr(self, f"_rpc_{method}")(*args)]

    def _rpc_init_process_group(
        self, master_address, master_port, rank_offset, world_size, group_name, backend, use_ray
    ) -> None:
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        if use_ray:
            raise NotImplementedError("this vLLM stand-in syncs weights through the stateless group only")
        group = StatelessProcessGroup.create(
            host=master_address, port=master_port, rank=rank_offset, world_size=world_size
        )
        self._sync_group = PyNcclCommunicator(group, device="cpu")

    def _rpc_update_weight(self, name: str, dtype, shape, empty_cache: bool = False) -> None:
        import torch

        if dtype != self.dtype:
            raise AssertionError(f"mismatch dtype: src {dtype}, dst {self.dtype}")
        weight = torch.empty(shape, dtype=dtype)
        self._sync_group.broadcast(weight, src=0, stream=None)
        with torch.no_grad():
            self.model.get_parameter(name).copy_(weight)
        if empty_cache:  # OpenRLHF sets it on the last parameter of a sync
            self._syncs += 1
            self._record()

    def _record_completion(self, completion: dict) -> None:
        directory = _record_dir()
        if directory:
            with open(os.path.join(directory, "completions.jsonl"), "a") as handle:
                handle.write(json.dumps(completion) + "\n")

    def _record(self) -> None:
        """The weights after this sync in ``engine_weights.pt``, and in ``engine_weights_1.pt`` after the first."""
        import torch

        directory = _record_dir()
        if directory:
            state = {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}
            names = ["engine_weights.pt"] + (["engine_weights_1.pt"] if self._syncs == 1 else [])
            for name in names:
                torch.save({"syncs": self._syncs, "state_dict": state}, os.path.join(directory, name))


def _record_dir() -> str | None:
    """``OPENRLHF_E2E_RECORD_DIR``, created when missing; None when it is not set."""
    directory = os.environ.get(RECORD_DIR_ENV)
    if directory:
        os.makedirs(directory, exist_ok=True)
    return directory
