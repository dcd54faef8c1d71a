"""``gmpo-plugins compare`` and ``gmpo-plugins parity``: losses and frameworks side by side.

    task.py        toy task (reverse a digit string), binary reward, char tokenizer
    model.py       tiny GPT-2 from a config, supervised warm-up, --model loading
    rollout.py     group sampling, rewards, group-normalised advantages
    trainer.py     the RL loop, one metrics record per step
    backends.py    the framework backend interface, the core backend, subprocess runner
    run_one.py     one run inside another virtualenv (used by backends.py)
    report.py      summary, terminal table, metrics.jsonl, report.md, PNG plots
    parity.py      hard fixed batches through every loss call path vs the core
    references.py  third-party implementations used as parity references

Needs transformers, rich and matplotlib (``pip install 'gmpo-plugins[compare]'``); nothing
here is imported by ``import gmpo_plugins``.
"""
