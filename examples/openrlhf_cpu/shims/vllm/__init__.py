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
asks for, bfloat16, computed in float32), through ``examples/seeded_generation.py``, the sampling every CPU
rollout stand-in shares: each request is seeded from the prompt's token ids and its sample index (the k-th
request for the same prompt since the last weight sync), so runs that differ only in how the actor splits
its batch, and other frameworks' stand-ins holding the same weights, draw the same responses. The count is
the engine's own: with one engine (``--vllm.num_engines 1``, as the tests and ``gmpo-plugins frameworks``
run it) it numbers every sample of a prompt; several engines would each count from 0. The weight
sync is OpenRLHF's own broadcast from the actor's rank 0, over gloo instead of NCCL.

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

import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
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


def _seeded_generation():
    """``examples/seeded_generation.py``, the sampling every CPU rollout stand-in shares (this shim
    is imported with only ``shims/`` on the path)."""
    if "seeded_generation" not in sys.modules:
        path = Path(__file__).resolve().parents[3] / "seeded_generation.py"
        module_spec = importlib.util.spec_from_file_location("seeded_generation", path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules["seeded_generation"] = module
        module_spec.loader.exec_module(module)
    return sys.modules["seeded_generation"]


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
        self.output_processor = _OutputProcessor()
        self._sample_index = _seeded_generation().SampleIndex()
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
        """One completion of ``prompt["prompt_token_ids"]``; its sample index is fixed here, in request order."""
        token_ids = list(prompt["prompt_token_ids"])
        return self._generate(token_ids, sampling_params, request_id, self._sample_index.next(token_ids))

    async def _generate(self, token_ids: list, params: SamplingParams, request_id: str, sample_index: int):
        generation = _seeded_generation()
        sample = generation.seeded_sample(
            self.model,
            token_ids,
            sample_index,
            params.max_tokens,
            temperature=getattr(params, "temperature", 1.0),
            top_k=getattr(params, "top_k", -1),
            top_p=getattr(params, "top_p", 1.0),
            min_new_tokens=getattr(params, "min_tokens", 0) or 0,
        )
        new = sample.token_ids
        finish_reason = "stop" if sample.stop_reason == "stop" else "length"
        logprobs = None
        if getattr(params, "logprobs", None) is not None:
            logprobs = [{tok: Logprob(lp)} for tok, lp in zip(new, sample.raw_logprobs, strict=True)]
        seed = generation.sample_seed(token_ids, sample_index)
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
            self._sample_index.reset()
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
