"""A rollout server that generates with Hugging Face ``generate`` on the CPU (stand-in for
verl's vLLM / SGLang servers, which need a GPU).

Two halves, each through verl's own extension point:

``HFReplica`` (driver side), registered as ``actor_rollout_ref.rollout.name=hf`` with
``verl.workers.rollout.replica.RolloutReplicaRegistry``. verl's ``LLMServerManager`` builds one
replica per rollout model-parallel group and calls ``launch_servers``; the replica starts one
``HFRolloutServer`` Ray actor (no CPU reserved: it runs between training phases). verl's agent
loop then calls the server's token-in/token-out ``generate``; the checkpoint manager calls its
lifecycle methods (sleep, wake_up, abort_all_requests, ...), which are no-ops here.

``HFServerAdapter`` (worker side), the ``BaseRollout`` verl's ``ActorRolloutRefWorker`` builds
through ``get_rollout_class(name, "async")``. 0.9.1 has no register function for it, only the
dict ``verl.workers.rollout.base._ROLLOUT_REGISTRY``, so an entry ``("hf", "async")`` is added
there. After each actor update verl hands it the actor's full weights (``update_weights``,
a collective over the FSDP ranks: every rank consumes the generator); the first rank of each
rollout group sends them to its server.

Reproducible rollouts: each request is sampled by ``seeded_generation.seeded_sample`` (examples/),
seeded from its prompt's token ids and its sample index among the samples of that prompt, the
function every CPU rollout stand-in shares: two runs that differ only in how the actor splits
the batch, and two frameworks holding the same weights, draw the same responses for each
prompt. The sample index comes from the request id: with
``actor_rollout_ref.rollout.full_determinism=true`` verl names each request ``det-<priority>``.
The legacy trainer's priority is the sample's position in the rollout batch, which repeats each
prompt ``rollout.n`` times interleaved; the v1 trainer sets none, and ``agent_loop`` (the CPU
launcher's agent loop manager) sets it to the sample's index within its group. Either way the
sample index is ``priority % rollout.n`` whichever replica serves it. Without full determinism
(random request ids) each server counts the samples of each prompt since its last weight
update, which is the same only with one replica.

Optional: with ``VERL_CPU_SAVE_WEIGHTS=<dir>`` in the environment of verl's task runner (the
process that launches the servers) each server saves every weight version it receives to
``<dir>/weights_<replica>_<step>.pt`` (the actor's parameters after that step; step 0 is the
initial model), for tests that compare parameters between runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import ray
import torch
from seeded_generation import SampleIndex, seeded_sample
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

NAME = "hf"
SAVE_WEIGHTS_ENV = "VERL_CPU_SAVE_WEIGHTS"


def server_name(replica_rank: int) -> str:
    """Ray actor name of a replica's server (the worker-side adapter finds it by name)."""
    return f"{NAME}_server_{replica_rank}"


class HFRolloutServer:
    """Token-in/token-out generation with ``model.generate`` (a Ray actor).

    Args:
        model_path: Folder of the Hugging Face model (verl's ``model_config.local_path``).
        response_length: Maximum new tokens (verl's agent loop sends no ``max_tokens``).
        replica_rank: Rank of the replica (names saved weight files).
        save_dir: Folder to save every received weight version to, or None.
        samples_per_prompt: verl's ``rollout.n`` (module docstring: the sample index).
    """

    def __init__(
        self, model_path: str, response_length: int, replica_rank: int, save_dir: str | None, samples_per_prompt: int
    ) -> None:
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation="eager")
        self.model.eval()
        self.response_length = response_length
        self.replica_rank = replica_rank
        self.save_dir = save_dir
        self.version = 0
        self.samples_per_prompt = samples_per_prompt
        self.sample_index = SampleIndex()

    def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any | None = None,
        video_data: Any | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """Sample one response; returns its token ids and their log-probs under the sampling
        distribution (temperature and top-p/top-k applied), as verl's vLLM server does."""
        max_new = int(sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens") or 0)
        max_new = min(max_new, self.response_length) if max_new > 0 else self.response_length
        position = re.fullmatch(r"det-(\d+)", request_id)
        if position is not None:
            index = int(position.group(1)) % self.samples_per_prompt
        else:
            index = self.sample_index.next(prompt_ids)
        sample = seeded_sample(
            self.model,
            prompt_ids,
            index,
            max_new,
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_k=int(sampling_params.get("top_k", -1)),
            top_p=float(sampling_params.get("top_p", 1.0)),
        )
        return TokenOutput(
            token_ids=sample.token_ids,
            log_probs=sample.logprobs,
            stop_reason="completed",
            extra_fields={"global_steps": self.version},
        )

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int | None) -> None:
        """Take the actor's weights (full tensors, Hugging Face names)."""
        self.model.load_state_dict(state_dict, strict=True)
        self.sample_index.reset()
        if version is not None:
            self.version = int(version)
        if self.save_dir:
            os.makedirs(self.save_dir, exist_ok=True)
            torch.save(state_dict, os.path.join(self.save_dir, f"weights_{self.replica_rank}_{self.version}.pt"))

    def set_global_steps(self, global_steps: int) -> None:
        self.version = int(global_steps)

    def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    def wake_up(self, *args: Any, **kwargs: Any) -> None:
        return None

    def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None

    def resume_generation(self) -> None:
        return None

    def clear_kv_cache(self) -> None:
        return None

    def release_kv_cache(self) -> None:
        return None

    def resume_kv_cache(self) -> None:
        return None

    def wait_for_requests_to_drain(self) -> None:
        return None

    def start_profile(self, **kwargs: Any) -> None:
        return None

    def stop_profile(self) -> None:
        return None


class HFReplica(RolloutReplica):
    """verl rollout replica backed by one ``HFRolloutServer`` actor (see the module docstring)."""

    async def launch_servers(self) -> None:
        server = (
            ray.remote(HFRolloutServer)
            .options(name=server_name(self.replica_rank), num_cpus=0, max_concurrency=1)
            .remote(
                model_path=self.model_config.get("local_path") or self.model_config.path,
                response_length=self.config.response_length,
                replica_rank=self.replica_rank,
                save_dir=os.environ.get(SAVE_WEIGHTS_ENV) or None,
                samples_per_prompt=int(self.config.n),
            )
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{NAME}-replica-{self.replica_rank}"


class HFServerAdapter(BaseRollout):
    """Worker-side half: forwards the actor's weights to this rank's rollout server.

    Args:
        config: verl's rollout config.
        model_config: verl's model config.
        device_mesh: The rollout device mesh verl builds (unused).
        replica_rank: Rollout replica of this rank; derived from ``RANK`` when -1.
    """

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        group = self.config.tensor_model_parallel_size * self.config.data_parallel_size
        group *= self.config.pipeline_model_parallel_size
        rank = int(os.environ.get("RANK", 0))
        self.replica_rank = rank // group if replica_rank == -1 else replica_rank
        self.is_leader = rank % group == 0

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        global_steps: int | None = None,
        wire_format: str = "named_tensors",
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the hf rollout takes wire_format='named_tensors', got {wire_format!r}")
        state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}  # collective: every rank
        if self.is_leader:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(state, global_steps)


def register() -> None:
    """Make ``actor_rollout_ref.rollout.name=hf`` known to verl on both sides."""
    RolloutReplicaRegistry.register(NAME, lambda: HFReplica)
    rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{HFServerAdapter.__module__}.{HFServerAdapter.__qualname__}"
