"""One module per framework: ``micro_loss(reference, settings, part)`` computes one
micro-batch's loss through the framework's own call site and config object, scaled as the
framework's trainer scales it before ``backward``, and returns (loss, metrics under core names).

A module may also define ``correction(settings, old_log_probs, rollout_log_probs, mask)``: the
framework's own rollout correction (``audit.corrections``).

``FRAMEWORKS`` lists them (name -> module, the package that must import, the distributions
whose versions label the cells).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Caller:
    """A framework the audit calls.

    Args:
        name: the framework's name in ``translations.TRANSLATIONS`` and in the table.
        module: the caller module (``micro_loss``).
        import_name: the package that must import for the framework to be audited here.
        distributions: the installed distributions whose versions label its cells.
    """

    name: str
    module: str
    import_name: str
    distributions: tuple[str, ...]

    def installed(self) -> bool:
        """Whether the framework's package is importable here."""
        return importlib.util.find_spec(self.import_name) is not None

    def load(self) -> ModuleType:
        """The caller module (imports the framework)."""
        return importlib.import_module(self.module)

    def versions(self) -> dict[str, str]:
        """``{distribution: version}`` of the installed distributions (torch included)."""
        found = {}
        for name in ("torch", *self.distributions):
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                continue
        return found


FRAMEWORKS: dict[str, Caller] = {
    caller.name: caller
    for caller in (
        Caller("verl", "gmpo_plugins.compare.audit.callers.verl", "verl", ("verl",)),
        Caller("trl", "gmpo_plugins.compare.audit.callers.trl", "trl", ("trl", "transformers")),
        Caller("skyrl", "gmpo_plugins.compare.audit.callers.skyrl", "skyrl", ("skyrl",)),
        Caller("openrlhf", "gmpo_plugins.compare.audit.callers.openrlhf", "openrlhf", ("openrlhf",)),
        Caller("liger", "gmpo_plugins.compare.audit.callers.liger", "liger_kernel", ("liger-kernel",)),
    )
}
