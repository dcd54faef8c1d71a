"""verl's TransferQueue agent loop with a per-sample request key (stand-in for the request
priority verl's v1 trainer never sets).

With ``actor_rollout_ref.rollout.full_determinism=true`` verl's agent loops name each request
``det-<priority>``. The legacy trainer sets ``priority`` to each sample's position in the
rollout batch; the v1 trainer (``AgentLoopWorkerTQ._run_prompt``) runs the ``rollout.n``
samples of a prompt as sessions 0..n-1 and sets no priority, so every request is ``det-0``,
the CPU rollout server (``rollout.py``) draws the same sample for every member of a group,
every GRPO advantage is 0 and the step changes nothing, without an error.

``SeededAgentLoopWorker`` passes the session index as the request's priority, so the request
of sample ``s`` of a prompt is ``det-<s>``: the server seeds it from the prompt's token ids and
``s``, the samples of a group differ, and the draw does not depend on which agent-loop worker
or rollout replica serves it. ``SeededAgentLoopManager`` is verl's ``AgentLoopManagerTQ``
with that worker, selected through verl's extension point
``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=verl_cpu.agent_loop.SeededAgentLoopManager``.
"""

from __future__ import annotations

from typing import Any

import ray
import transfer_queue as tq
from verl.experimental.agent_loop import AgentLoopWorker
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

_TQ_WORKER = AgentLoopWorkerTQ.__ray_actor_class__  # verl's class under its Ray actor wrapper


class _SeededAgentLoopWorker(AgentLoopWorker):
    """verl's ``AgentLoopWorkerTQ`` whose requests carry the sample's session index as priority.

    Its methods are ``AgentLoopWorkerTQ``'s own functions, on verl's plain ``AgentLoopWorker``:
    verl's class is only reachable inside its Ray actor wrapper, which Ray would copy when
    shipping a subclass of it to a worker process (breaking its ``super()``). ``__init__``
    does what ``AgentLoopWorkerTQ.__init__`` does (join TransferQueue, track the tasks).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tq.init()
        self.background_tasks: set[Any] = set()

    generate_sequences = _TQ_WORKER.generate_sequences
    _run_prompt = _TQ_WORKER._run_prompt
    _agent_loop_postprocess = _TQ_WORKER._agent_loop_postprocess

    async def _run_agent_loop(self, sampling_params: dict[str, Any], trajectory: dict[str, Any], **kwargs: Any) -> Any:
        kwargs.setdefault("priority", int(kwargs["session_id"]))
        return await super()._run_agent_loop(sampling_params, trajectory, **kwargs)


SeededAgentLoopWorker = ray.remote(_SeededAgentLoopWorker)


class SeededAgentLoopManager(AgentLoopManagerTQ):
    """verl's ``AgentLoopManagerTQ`` starting ``SeededAgentLoopWorker`` actors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = SeededAgentLoopWorker
