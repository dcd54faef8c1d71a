"""Frameworks on equal footing at trainer level: one run spec, each framework's own launch.

    spec.py        ``RunSpec``: the TOML run spec, its fields and their checks (``load_spec``)
    reward.py      the spec's reward function: one signature, found by reference, checked
    launch.py      ``Launch`` (command, environment, files, preparation, differences) and the
                   refusal ``UnsupportedSettingError``
    datasets.py    the spec's dataset in verl's and SkyRL's formats (``python -m``)
    translate/     one translator per framework (verl, openrlhf, trl, skyrl), each reusing
                   its adapter's option table
    render.py      launches as text (``gmpo-plugins frameworks --dry-run``)

Imports go down only: ``translate`` uses ``spec``, ``launch`` and the adapters' ``options``
modules (which import no framework); nothing here imports a framework, so a dry run works
where none is installed.
"""
