"""A CPU inference engine and generator for SkyRL (stand-ins for its vLLM servers and gym rollout).

SkyRL's trainer talks to inference through two objects that ``BasePPOExp`` builds in
overridable hooks, and both are replaced here:

``CPUInferenceClient`` (``BasePPOExp.get_inference_client``) stands in for
``RemoteInferenceClient`` and its vLLM HTTP servers (vLLM needs a GPU). It implements SkyRL's
``InferenceEngineInterface`` (0.3.0's and 0.4.0's: the methods of both); what the trainer and
the policy worker call on it for weight sync (``get_world_size``, ``increment_weight_version``,
pause/resume/sleep/wake_up, ``reset_prefix_cache``; on 0.3.0 also
``init_weight_update_communicator``, ``start_weight_update``, ``update_weights_nccl``,
``finish_weight_update``; on 0.4.0 the ``server_urls`` and ``data_parallel_size`` that
SkyRL's weight-sync control-plane client is built with, never contacted) is a no-op or
bookkeeping, because the weights themselves arrive through SkyRL's own sender (0.3.0's
``BroadcastWeightTransferSender``, 0.4.0's ``FsdpWeightSource`` + NCCL trainer engine) -> the
``vllm`` stand-in (``shims/``) -> ``HFEngine.load_weights``. LoRA loading is not supported.

``HFEngine`` is a named Ray actor holding a Hugging Face model in float32; it samples with
``seeded_generation.seeded_sample`` (examples/; seed from the prompt's token ids and the sample
index, the function every CPU rollout stand-in shares) and counts
the weight versions it received.

``SeededGenerator`` (``BasePPOExp.get_generator``) stands in for ``SkyRLGymGenerator``: one turn
per trajectory, no environment. The reward is a run spec's ``reward(response, answer)`` when one
is given (the response decoded without special tokens, as verl's and TRL's reward hooks decode
it; the answer the row's ``reward_spec.ground_truth``), else the fraction of response tokens that
are digits (it varies between samples, so GRPO's advantages are not all zero).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import ray
import torch
from seeded_generation import seeded_sample
from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface
from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput
from vllm.distributed.weight_transfer.nccl_engine import ENGINE_ACTOR


class HFEngine:
    """Ray actor: a float32 HF causal LM that samples and receives weights (module docstring)."""

    def __init__(self, model_path: str) -> None:
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.version = 0

    def generate(self, requests: list[tuple[list[int], int]], params: dict[str, Any]) -> list[Any]:
        """One ``Sample`` per ``(prompt_ids, sample_index)``."""
        return [seeded_sample(self.model, ids, index, **params) for ids, index in requests]

    def load_weights(self, weights: dict[str, torch.Tensor]) -> int:
        """Load a full state dict (every parameter by name); returns the new weight version."""
        names = dict(self.model.named_parameters())
        unknown = sorted(set(weights) - set(names))
        missing = sorted(set(names) - set(weights))
        if unknown or missing:
            raise ValueError(f"HFEngine.load_weights: unknown {unknown[:3]}, missing {missing[:3]}")
        with torch.no_grad():
            for name, tensor in weights.items():
                names[name].copy_(tensor.to(names[name].dtype))
        self.version += 1
        return self.version

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The current weights (for tests that compare runs)."""
        return {name: p.detach().clone() for name, p in self.model.named_parameters()}

    def weight_version(self) -> int:
        """How many weight syncs arrived."""
        return self.version


def start_engine(model_path: str) -> Any:
    """Start the named engine actor (no CPU reserved: it runs between training phases)."""
    return ray.remote(num_cpus=0)(HFEngine).options(name=ENGINE_ACTOR).remote(model_path)


class CPUInferenceClient(InferenceEngineInterface):
    """SkyRL's inference-client interface over ``HFEngine`` (module docstring). Picklable: the
    policy workers receive it in ``init_weight_sync_state``."""

    # what SkyRL 0.4's policy worker builds its weight-sync control-plane client with (module
    # docstring); no HTTP server behind it
    server_urls = (f"ray://{ENGINE_ACTOR}",)
    data_parallel_size = 1

    def __init__(self, engine: Any, model_name: str) -> None:
        self.engine = engine
        self._model_name = model_name

    @property
    def model_name(self) -> str:
        return self._model_name

    async def sample(self, requests: list[tuple[list[int], int]], params: dict[str, Any]) -> list[Any]:
        """Seeded samples from the engine (see ``HFEngine.generate``)."""
        return await asyncio.wrap_future(self.engine.generate.remote(requests, params).future())

    async def generate(self, input_batch: Any) -> Any:
        raise NotImplementedError("CPUInferenceClient: use SeededGenerator (no token-in/out server on CPU)")

    def get_endpoint_url(self) -> str:
        raise NotImplementedError("CPUInferenceClient has no HTTP endpoint")

    async def chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("CPUInferenceClient has no chat completion endpoint")

    async def render_chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("CPUInferenceClient has no chat completion endpoint")

    async def completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("CPUInferenceClient has no completion endpoint")

    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def init_weight_update_communicator(self, init_info: Any) -> None:
        return None

    async def update_named_weights(self, request: Any) -> None:
        raise NotImplementedError("CPUInferenceClient receives weights through the vllm stand-in")

    async def load_lora_adapter(self, lora_name: str, lora_path: str) -> dict[str, Any]:
        raise NotImplementedError("CPUInferenceClient: LoRA adapters are not supported on CPU")

    async def start_weight_update(self, is_checkpoint_format: bool = True) -> None:
        return None

    async def update_weights_nccl(self, update_info: dict[str, Any]) -> None:
        return None

    async def finish_weight_update(self) -> None:
        return None

    async def teardown(self) -> None:
        return None

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> None:
        return None

    async def pause_generation(self) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def finish_session(self, session_id: str) -> None:
        return None

    async def get_world_size(self) -> tuple[int, int]:
        return 1, 1

    def increment_weight_version(self) -> None:
        """Called by SkyRL after each completed weight sync (the engine counts its own)."""
        return None


def digit_reward(tokenizer: Any, response_ids: list[int]) -> float:
    """Fraction of the response's tokens that decode to a digit (0 for an empty response)."""
    words = [tokenizer.decode([token]).strip() for token in response_ids]
    return sum(word.isdigit() for word in words) / max(1, len(words))


class SeededGenerator(GeneratorInterface):
    """One seeded sample per trajectory from ``CPUInferenceClient``, scored by ``reward``
    (``reward(response, answer) -> float``; None: ``digit_reward``; module docstring)."""

    def __init__(
        self,
        generator_cfg: Any,
        tokenizer: Any,
        client: CPUInferenceClient,
        reward: Callable[[str, str], float] | None = None,
    ) -> None:
        self.cfg = generator_cfg
        self.tokenizer = tokenizer
        self.client = client
        self.reward = reward

    def score(self, response: list[int], extras: dict[str, Any] | None) -> float:
        """The reward of one response (class docstring)."""
        if self.reward is None:
            return digit_reward(self.tokenizer, response)
        answer = str((extras or {})["reward_spec"]["ground_truth"])
        return float(self.reward(self.tokenizer.decode(response, skip_special_tokens=True), answer))

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        sampling = self.cfg.sampling_params
        params = {
            "max_new_tokens": sampling.max_generate_length,
            "temperature": sampling.temperature,
            "eos_token_id": self.tokenizer.eos_token_id,
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        trajectory_ids = input_batch.get("trajectory_ids") or []
        requests = []
        for i, messages in enumerate(input_batch["prompts"]):
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            index = trajectory_ids[i].repetition_id if trajectory_ids else 0
            requests.append((ids, index))
        samples = await self.client.sample(requests, params)
        extras = input_batch.get("env_extras") or [None] * len(requests)
        responses = [sample.token_ids for sample in samples]
        return {
            "prompt_token_ids": [ids for ids, _ in requests],
            "response_ids": responses,
            "rewards": [self.score(response, extra) for response, extra in zip(responses, extras, strict=True)],
            "loss_masks": [[1] * len(response) for response in responses],
            "stop_reasons": [sample.stop_reason for sample in samples],
            "rollout_metrics": {},
            "rollout_logprobs": [sample.logprobs for sample in samples],
        }
