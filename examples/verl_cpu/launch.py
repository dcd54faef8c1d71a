"""``python -m verl_cpu [hydra overrides]``: verl's PPO trainer on the CPU (examples/ on PYTHONPATH).

What runs is verl 0.9.1's own ``verl.trainer.main_ppo`` path with its default trainer
(``trainer.use_v1=true``): Hydra config (verl's ``ppo_trainer.yaml``) -> ``validate_config`` ->
``run_ppo(config, TaskRunnerV1)`` -> the v1 trainer of ``trainer.v1.trainer_mode`` -> ``fit()``
with TransferQueue, engine workers and the FSDP2 engine. The only differences are the stand-ins
of this package (CPU platform, gloo workers in verl's ``PPOTrainerSync``, HF rollout server,
per-sample request keys), passed to verl through its extension points, and ``CPU_OVERRIDES``
below, applied before the caller's overrides. ``trainer.use_v1=false`` runs verl's deprecated
legacy ``RayPPOTrainer`` instead (``legacy``), kept while verl ships it.

Checked before Ray starts, so a bad setting fails in seconds instead of after start-up:
    - Ray resources: verl reserves one placement bundle {"CPU": 3, "GPU": 1} per rank, one CPU
      for its task runner and, in the v1 trainer, one for TransferQueue's controller and one
      per storage unit, and waits without a message when Ray has fewer; ``ray_init.num_cpus`` /
      ``num_gpus`` (logical counts, set from ``trainer.n_gpus_per_node`` unless given) are checked.
    - the policy loss: ``gmpo_plugins.adapters.verl.check_policy_loss`` (verl's own lookup of
      ``loss_mode``, then the actor fields a gmpo-plugins loss translates and the
      ``algorithm.rollout_correction`` settings verl would not apply to it).
A failed check prints one message naming the setting and exits with status 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.dirname(HERE)
PACKAGE = os.path.basename(HERE)

# the CPU platform for verl in every process (read by verl's platform manager), verl's own
# switch to pick the FSDP engine class (tensors stay on the CPU), and one thread per process
WORKER_ENV = {
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

TRAINER_MODE = "cpu_sync"  # trainer.CPUTrainerSync
AGENT_LOOP_MANAGER = f"{PACKAGE}.agent_loop.SeededAgentLoopManager"
STORAGE_UNITS = 1  # TransferQueue storage units, one logical Ray CPU each (verl's default: 8)

CPU_OVERRIDES = [
    "trainer.device=cpu",
    f"trainer.v1.trainer_mode={TRAINER_MODE}",  # verl's PPOTrainerSync with gloo workers
    f"transfer_queue.backend.SimpleStorage.num_data_storage_units={STORAGE_UNITS}",
    "trainer.nnodes=1",
    "trainer.logger=[console]",
    "actor_rollout_ref.actor.strategy=fsdp2",  # FSDP1 refuses CPU parameters with sync_module_states
    "actor_rollout_ref.actor.use_torch_compile=false",
    "++actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "++actor_rollout_ref.ref.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "actor_rollout_ref.model.use_remove_padding=false",  # no flash-attn varlen kernel on CPU
    "+actor_rollout_ref.model.override_config.attn_implementation=eager",
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.full_determinism=true",  # requests named by batch position: reproducible
    "actor_rollout_ref.rollout.agent.num_workers=1",
    f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={AGENT_LOOP_MANAGER}",  # a key per sample
    "reward.num_workers=1",
    "data.dataloader_num_workers=0",
    "+ray_kwargs.ray_init.include_dashboard=false",
]

CPUS_PER_RANK = 3  # verl's placement bundle per rank: {"CPU": 3, "GPU": 1}
TASK_RUNNER_CPUS = 1


class LaunchError(ValueError):
    """A setting that would make the run fail late or wait forever."""


def prepare_environment() -> None:
    """Environment every Ray process inherits: the stand-ins are imported by ``import verl``
    (verl's ``VERL_USE_EXTERNAL_MODULES``) and found on PYTHONPATH."""
    os.environ.update(WORKER_ENV)
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if PACKAGE not in modules:
        os.environ["VERL_USE_EXTERNAL_MODULES"] = ",".join([*modules, PACKAGE])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if EXAMPLES not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([EXAMPLES, *paths])
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)


def compose(overrides: Sequence[str]):
    """verl's ``ppo_trainer`` config with ``CPU_OVERRIDES`` then ``overrides``: verl's default v1
    trainer unless ``overrides`` set ``trainer.use_v1=false`` (the deprecated legacy trainer, which
    then keeps verl's own agent loop manager: ``agent_loop``'s seeded one is for the v1 trainer)."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = hydra_compose(config_name="ppo_trainer", overrides=[*CPU_OVERRIDES, *overrides])
    if not config.trainer.use_v1:
        # the deprecated legacy trainer numbers its requests itself; AGENT_LOOP_MANAGER is the v1 one
        config.actor_rollout_ref.rollout.agent.agent_loop_manager_class = None
    return config


def transfer_queue_cpus(config) -> int:
    """Logical Ray CPUs TransferQueue's actors reserve in the v1 trainer: its controller and each
    storage unit (0 for the legacy trainer)."""
    if not config.trainer.use_v1:
        return 0
    return 1 + int(config.transfer_queue.backend.SimpleStorage.num_data_storage_units)


def check_resources(config) -> None:
    """Fill in and check Ray's logical resources (see the module docstring)."""
    from omegaconf import open_dict

    ranks = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    others = TASK_RUNNER_CPUS + transfer_queue_cpus(config)
    needed = CPUS_PER_RANK * ranks + others
    ray_init = config.ray_kwargs.ray_init
    with open_dict(ray_init):
        if ray_init.get("num_gpus") is None:
            ray_init.num_gpus = ranks
        if ray_init.get("num_cpus") is None:
            ray_init.num_cpus = needed
    if int(ray_init.num_gpus) < ranks:
        raise LaunchError(
            f"+ray_kwargs.ray_init.num_gpus={ray_init.num_gpus} is below trainer.n_gpus_per_node * trainer.nnodes "
            f"= {ranks}: verl would wait forever for its placement group. Leave it unset or set it to {ranks}."
        )
    if int(ray_init.num_cpus) < needed:
        raise LaunchError(
            f"ray_kwargs.ray_init.num_cpus={ray_init.num_cpus} is too small for {ranks} rank(s): verl reserves "
            f"{CPUS_PER_RANK} logical CPUs per rank plus {others} for its task runner and TransferQueue's actors "
            f"and would wait forever for them. Set it to at least {needed} (logical CPUs; any machine will do)."
        )


def check_loss(config) -> None:
    """The policy-loss settings, checked by the gmpo-plugins verl adapter."""
    from verl.utils.config import omega_conf_to_dataclass

    from gmpo_plugins.adapters.verl import check_policy_loss

    check_policy_loss(
        omega_conf_to_dataclass(config.actor_rollout_ref.actor), config.algorithm.get("rollout_correction")
    )


def run(overrides: Sequence[str]) -> None:
    """Compose, check, then train with verl's ``run_ppo`` and the CPU task runner."""
    prepare_environment()
    import importlib

    importlib.import_module(PACKAGE)  # registers the stand-ins in this process
    config = compose(overrides)
    check_resources(config)
    check_loss(config)

    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    run_ppo(config, task_runner_class=task_runner(config))


def task_runner(config):
    """verl's ``TaskRunnerV1`` (the trainer comes from ``trainer.v1.trainer_mode``), or, with
    ``trainer.use_v1=false``, the deprecated legacy trainer's CPU task runner (``legacy``)."""
    if config.trainer.use_v1:
        from verl.trainer.main_ppo import TaskRunnerV1

        return TaskRunnerV1
    from verl_cpu.legacy import CPUTaskRunner  # type: ignore[import-not-found]

    return CPUTaskRunner


def main(argv: Sequence[str] | None = None) -> int:
    overrides = list(sys.argv[1:] if argv is None else argv)
    from gmpo_plugins.adapters.verl import VerlConfigError

    try:
        run(overrides)
    except (LaunchError, VerlConfigError) as error:
        print(f"verl_cpu: {error}", file=sys.stderr)
        return 2
    return 0
