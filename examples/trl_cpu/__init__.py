"""CPU stand-ins for comparing TRL's GRPOTrainer with other frameworks' trainers (examples only; not
part of the gmpo-plugins package). TRL trains on CPU as it is; what these replace is its sampling,
which draws a whole generation batch from one random stream, so that TRL's rollouts come from the
sampling every CPU rollout stand-in shares (examples/seeded_generation.py) and TRL sees the same
first rollout as verl, OpenRLHF and SkyRL on their stand-ins:

    rollout    ``seeded_rollout``: GRPOTrainer's ``rollout_func`` (TRL's own hook for custom
               generation), one seeded sample per prompt of the batch
    weights    ``FirstUpdateWeights``: a TrainerCallback that saves the parameters after the
               first RL step (its last optimiser step on the first generation batch);
               ``StepWeights`` after each optimiser step of it (``examples/optimiser_steps.py``)
    launch     ``python -m trl_cpu SCRIPT [ARGS]``: runs a training script (the one
               ``gmpo-plugins frameworks`` writes) with both added to every GRPOTrainer

Run with the ``examples`` folder on PYTHONPATH.
"""
