r"""SkyRL's own training entry point with the registry losses registered first.

    python -m gmpo_plugins.adapters.skyrl <SkyRL overrides>
    python -m skyrl.train.entrypoints.main_base \\
        trainer.override_entrypoint=gmpo_plugins.adapters.skyrl.entrypoint <SkyRL overrides>

Both register the losses in the driver, then run ``skyrl.train.entrypoints.main_base.main``
with the same overrides (``trainer.override_entrypoint`` removed: it is SkyRL's hook for
this, not a config field). SkyRL's ``initialize_ray`` then pushes the registry to its Ray
registry actor, where every worker finds it. ``--names`` prints which
``policy_loss_type`` runs which registry loss.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gmpo_plugins.adapters.skyrl.registration import SkyRLName, register_losses

OVERRIDE = "trainer.override_entrypoint="


def table(names: Sequence[SkyRLName]) -> str:
    """One line per registry loss: the policy_loss_type values that select it."""
    lines = ["registry loss     SkyRL trainer.algorithm.policy_loss_type"]
    for name in names:
        if name.bare is not None:
            types = f"{name.bare}  or  {name.prefixed}"
        else:
            types = f"{name.prefixed}  ('{name.loss}' alone is {name.taken_by})"
        lines.append(f"{name.loss:<17} {types}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Register, then run SkyRL's ``main_base.main()`` on ``argv`` (default ``sys.argv[1:]``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    names = register_losses()
    if args == ["--names"]:
        print(table(names))
        return
    from skyrl.train.entrypoints.main_base import main as skyrl_main

    sys.argv = [sys.argv[0], *(arg for arg in args if not arg.startswith(OVERRIDE))]
    skyrl_main()
