"""The toy RL experiment of ``gmpo-plugins compare``: everything but the loss.

task.py        toy task (reverse a digit string), binary reward, char tokenizer
encoding.py    prompts and answers as token tensors
model.py       tiny GPT-2 from a config, supervised warm-up, --model loading
rollout.py     group sampling, rewards, group-normalised advantages
evaluate.py    greedy and sampled accuracy on the held-out prompts
settings.py    named loss settings (grpo_clip_wider: grpo at GMPO's ratio band)
trainer.py     the RL loop, one metrics record per step; the loss comes from a backend
run_one.py     one run inside another virtualenv (started by ``backends.base``)
"""
