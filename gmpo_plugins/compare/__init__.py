"""Comparisons: losses side by side (``gmpo-plugins compare``), call paths side by side
(``gmpo-plugins parity``) and the frameworks' own implementations against the registry
(``gmpo-plugins audit``), each in a room of its own.

    experiment/  the toy RL task and its training loop (task, tokenizer encoding, tiny model
                 and warm-up, rollout, held-out evaluation, the RL loop, one run in another
                 virtualenv: ``python -m gmpo_plugins.compare.experiment.run_one``)
    backends/    how one policy-loss call goes through each framework's own call path (the
                 interface, the core backend, where a framework runs; one module per framework)
    parity/      the parity harness: hard fixed batches through every call path and the
                 third-party references it is measured against
    audit/       each framework's own implementation of each registry loss, called through
                 its own call site with the registry's setting translated (data), one
                 verdict per (loss, framework)
    report/      what results become: statistics with intervals, the paper's claims, the
                 per-loss summary, plots, the report folder and its overwrite rule

Imports between the rooms go one way: ``experiment`` and ``parity`` use ``backends``;
``audit`` uses ``parity`` (its hard batches) and ``backends`` (TRL's tensor trainer);
``report`` and ``backends`` use no other room (``tests/core/test_imports.py`` checks it).

Needs transformers, rich and matplotlib (``pip install 'gmpo-plugins[compare]'``); nothing
here is imported by ``import gmpo_plugins``.
"""
