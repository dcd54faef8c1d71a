"""One translator per framework: the run spec as that framework's own launch.

Each module has ``translate(spec) -> Launch`` and a docstring table (spec setting -> the
framework's setting); each reuses its adapter's option table and reads the translated
settings back through the adapter, so a loss hyper-parameter the framework would run
differently is refused (``UnsupportedSettingError``: framework and setting), never dropped.
"""

from __future__ import annotations

from collections.abc import Callable

from gmpo_plugins.frameworks.launch import Launch
from gmpo_plugins.frameworks.spec import RunSpec
from gmpo_plugins.frameworks.translate import openrlhf, skyrl, trl, verl

TRANSLATORS: dict[str, Callable[[RunSpec], Launch]] = {
    "verl": verl.translate,
    "openrlhf": openrlhf.translate,
    "trl": trl.translate,
    "skyrl": skyrl.translate,
}
FRAMEWORKS = tuple(TRANSLATORS)


def translate(spec: RunSpec, frameworks: tuple[str, ...] = FRAMEWORKS) -> list[Launch]:
    """Every framework's launch, in the order given; the first refusal raises."""
    return [TRANSLATORS[name](spec) for name in frameworks]
