"""Frameworks on equal footing at trainer level: one run spec, each framework's own launch.

    spec.py        ``RunSpec``: the TOML run spec, its fields and their checks (``load_spec``)
    reward.py      the spec's reward function: one signature, found by reference, checked
    launch.py      ``Launch`` (command, environment, files, preparation, differences) and the
                   refusal ``UnsupportedSettingError``
    datasets.py    the spec's dataset in verl's and SkyRL's formats (``python -m``)
    translate/     one translator per framework (verl, openrlhf, trl, skyrl), each reusing
                   its adapter's option table
    render.py      launches as text (``gmpo-plugins frameworks --dry-run``) and as folders
    standins.py    a launch as it runs on this machine (verl: its GPU, or examples/verl_cpu)
    runner.py      a launch run by the framework's own trainer in its virtualenv (subprocess)
    metrics.py     each trainer's logged metrics in one vocabulary, per RL step
    plots.py       steps.png: one line per framework per metric (matplotlib)
    report.py      report.md (per-step plot and tables, differences, failures) and records.json

Imports go down only: ``translate`` uses ``spec``, ``launch`` and the adapters' ``options``
modules (which import no framework); ``runner`` finds interpreters as ``compare`` does
(``compare.backends.base``); ``plots`` takes compare's colours (``compare.report.plots``).
Nothing here imports a framework, so a dry run works where none is installed.
"""
