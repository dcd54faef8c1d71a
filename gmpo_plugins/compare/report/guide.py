"""The reading guide at the end of report.md."""

READING_GUIDE = """\
## How to read it

- **heldout.png**: accuracy on the task's fixed held-out prompts, which neither warm-up nor
  RL ever samples: greedy exact match (one argmax completion per prompt) and the sampled
  pass rate (4 completions per prompt at temperature 1), every `--eval-every` steps and at
  step 0 (the warmed-up model, identical for every loss of a seed). This is the number
  the ablation table reports.
- **reward.png**: fraction of the training completions (temperature 1) that are exactly
  right, per seed smoothed over 5 steps, then averaged over seeds. Step 1 is identical for
  every loss of a seed (same model, same rollout); later steps differ because the updates do.
- **ratio_range.png**: the quantity of the GMPO paper's Figure 1. Top: per step, the band
  between the 1st and 99th percentile of the token log ratio log(pi_after/pi_old) after the
  step's updates (each percentile averaged over seeds); a narrower band means the policy
  moved less per rollout batch. Bottom: the largest |log ratio| the loss path saw, which
  comes from single tokens and jumps from step to step (log scale).
- **entropy_kl.png**: mean per-token entropy of the policy and its exact KL to the initial
  (warmed-up) policy, on the sampled responses. The paper reports higher entropy and lower
  KL for GMPO at 7B scale.
- Bands and ± are 95% Student t intervals over seeds: with 3 seeds t = 4.30, so an interval
  is wide unless the seeds agree. The sign counts say how often a difference held.

## What this run does and does not show

It runs each loss through the chosen framework's real loss call path, on identical data per
seed, and measures what the paper's claims are about on a task where response lengths
vary. It does **not** reproduce the paper's benchmarks: the model has ~0.1M parameters, the
task is a toy, runs are a few dozen steps at one learning rate for every loss, without
tuning per loss. A verdict here says how the losses behave on this toy, not which is better
for LLM reasoning.
"""
