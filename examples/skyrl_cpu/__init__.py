"""CPU stand-ins that let SkyRL's own PPO trainer (0.3.0 and 0.4.0) run without a GPU (examples
only; not part of the gmpo-plugins package). Each replaces one piece that needs CUDA or vLLM:

    workers            FSDP policy/ref workers on gloo and a CPU mesh, no CUDA calls
                       (RayPPOTrainer.build_models' worker classes; a few torch.cuda patches);
                       with GMPO_CPU_STEP_PARAMS, the parameters after each optimiser step of
                       RL step 1 (Optimizer.register_step_post_hook, ../optimiser_steps.py)
    engine             HF inference engine (Ray actor), SkyRL inference-client interface and a
                       seeded one-turn generator (BasePPOExp.get_inference_client/get_generator),
                       sampling with examples/seeded_generation.py
    shims/vllm         vLLM's NCCL weight-transfer engine, trainer side, carrying weights over
                       Ray (0.3.0's and 0.4.0's interfaces; for 0.4.0 also the WeightSource
                       contract, trainer factory and the names its config and worker import)
    shims/flash_attn   the padding helpers skyrl's model wrapper imports at module level
    experiment         BasePPOExp with those hooks; records the logged metrics
    launch             ``python -m skyrl_cpu [--out DIR] <SkyRL overrides>``

Run from the ``examples`` folder (or with it on PYTHONPATH). On Python 3.11, skyrl 0.3.0 also
needs ``tests/skyrl/shims`` on PYTHONPATH (see its docstring).
"""
