"""Opt-in: fail a ``gmpo-openrlhf`` run whose Ray resources never arrive, instead of waiting forever.

OpenRLHF asks Ray for placement groups and actors with GPUs (``ray.get(placement_group.ready())``,
``RayActorGroup``); on a cluster that lacks them it blocks without a message. ``StallWatch`` polls
Ray's control store (GCS) from a daemon thread once Ray is initialised: a placement group that is not
created, or an actor still pending creation, for longer than ``timeout_s`` seconds is a stall. It then
writes one message naming what waits, what it asks for and what the cluster has, and interrupts the
main thread (``KeyboardInterrupt`` there, which ``gmpo-openrlhf`` turns into exit status 1 with the
message).

The watch is off unless asked for: it ends a user's run, and an autoscaling cluster may
legitimately take longer than any fixed time to add nodes. ``GMPO_OPENRLHF_SCHEDULE_TIMEOUT``
set to a number of seconds > 0 turns it on with that ``timeout_s``; unset, empty or 0 leaves
it off.
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time

TIMEOUT_ENV = "GMPO_OPENRLHF_SCHEDULE_TIMEOUT"
POLL_S = 2.0


def timeout_from_env() -> float:
    """``GMPO_OPENRLHF_SCHEDULE_TIMEOUT`` in seconds (a non-negative number); 0 (off) when unset or empty."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"gmpo_plugins: {TIMEOUT_ENV}={raw!r} must be a number of seconds >= 0 (0: no watch)")
    return value


def _waiting() -> dict[str, str]:
    """``{key: description}`` of every placement group not yet created and actor pending creation."""
    import ray
    from ray._private import state
    from ray.util import placement_group_table

    waiting = {}
    for group_id, group in placement_group_table().items():
        if group["state"] in ("PENDING", "RESCHEDULING"):
            bundles = list(group["bundles"].values())
            waiting[f"pg:{group_id}"] = (
                f"placement group {group_id[:8]} ({group['stats']['scheduling_state']}) asks for bundles {bundles}"
            )
    job = ray.get_runtime_context().get_job_id()
    for actor_id, actor in state.actors(actor_state_name="PENDING_CREATION").items():
        if actor.get("JobID") == job:
            waiting[f"actor:{actor_id}"] = f"actor {actor['ActorClassName']} {actor_id[:8]} is pending creation"
    return waiting


class StallWatch:
    """Daemon thread: ``start()`` it before the work, ``message`` is set once a stall was detected."""

    def __init__(self, timeout_s: float, poll_s: float = POLL_S) -> None:
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.message: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gmpo-openrlhf-stall-watch", daemon=True)

    def start(self) -> StallWatch:
        if self.timeout_s > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        import ray

        first_seen: dict[str, float] = {}
        while not self._stop.wait(self.poll_s):
            if not ray.is_initialized():
                continue
            try:
                waiting = _waiting()
            except Exception:  # noqa: BLE001 - Ray shutting down or GCS busy: try again next poll
                continue
            now = time.monotonic()
            first_seen = {key: first_seen.get(key, now) for key in waiting}
            stalled = [waiting[key] for key, since in first_seen.items() if now - since > self.timeout_s]
            if stalled:
                self._fail(stalled, ray.cluster_resources())
                return

    def _fail(self, stalled: list[str], resources: dict) -> None:
        have = {name: value for name, value in sorted(resources.items()) if name in ("CPU", "GPU") or "GPU" in name}
        self.message = (
            f"gmpo-openrlhf: Ray could not schedule the run for {self.timeout_s:g} s: "
            + "; ".join(stalled)
            + f"; the cluster has {have}. Give the cluster those resources (or fewer --*.num_gpus_per_node, "
            f"--vllm.num_engines), or raise {TIMEOUT_ENV} if nodes are still being added."
        )
        print(self.message, file=sys.stderr, flush=True)
        _thread.interrupt_main()
        time.sleep(60)  # the main thread normally exits first; if it cannot be interrupted, end the process
        os._exit(1)
