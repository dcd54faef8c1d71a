"""CPU stand-ins that let verl 0.9.1's own PPO trainer run without a GPU (examples only; not
part of the gmpo-plugins package).

Each replaces one piece that needs CUDA, vLLM or SGLang, or makes the CPU run reproducible,
through verl's extension points:

    cpu_platform CPU platform          verl.plugin.platform PlatformRegistry ("cpu")
    rollout    HF ``generate`` server   RolloutReplicaRegistry ("hf") + worker-side BaseRollout
    workers    gloo process group       ActorRolloutRefWorker.actor_worker_cls;
               with GMPO_CPU_STEP_PARAMS, the parameters after each optimiser step of RL step 1
                                        (Optimizer.register_step_post_hook,
                                        ../optimiser_steps.py)
    trainer    verl's PPOTrainerSync    register_trainer ("cpu_sync"), trainer.v1.trainer_mode:
               with the gloo workers    the v1 trainer (verl's default)
    agent_loop per-sample request keys  rollout.agent.agent_loop_manager_class
    legacy     the deprecated legacy    run_ppo(config, task_runner_class=CPUTaskRunner)
               trainer's task runner    (trainer.use_v1=false, deprecated)
    assets     tiny Qwen2, tokenizer, parquet data and reward built locally
    launch     ``python -m verl_cpu [overrides]``: verl's trainer with the stand-ins

Importing this package registers the platform, the rollout and the v1 trainer mode; ``launch``
makes every Ray process import it through verl's ``VERL_USE_EXTERNAL_MODULES``.
"""

from verl_cpu import cpu_platform as _platform  # noqa: F401  (registers the "cpu" platform)
from verl_cpu import rollout as _rollout
from verl_cpu import trainer as _trainer  # noqa: F401  (registers trainer.v1.trainer_mode=cpu_sync)

_rollout.register()
