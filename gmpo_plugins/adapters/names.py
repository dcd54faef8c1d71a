"""Names every adapter shares, importable without torch or the core.

verl's entry point (``verl_plugin``) needs them when the adapter itself fails to import, to
register stand-ins under the names the adapter would have registered; the other adapters
import them from here so that each name is written once.

    PACKAGE             the distribution name, as users install it
    PREFIX              ``gmpo_plugins.<loss>``: the framework setting value that always
                        selects the registry loss ``<loss>`` (a bare ``<loss>`` may belong
                        to the framework)
    BUILTIN_LOSS_NAMES  the built-in losses' names (``tests/core/test_registry.py`` checks
                        them against the registry's built-ins)
"""

from __future__ import annotations

PACKAGE = "gmpo-plugins"
PREFIX = "gmpo_plugins."
BUILTIN_LOSS_NAMES = (
    *("gmpo", "gmpo_noclip", "gmpo_seqclip", "gmpo_nonorm", "grpo", "dapo", "dr_grpo", "gspo"),
    *("cispo", "sapo", "gpg", "dro", "dppo_tv", "dppo_kl", "clip_cov", "kl_cov", "luspo", "vespo"),
    *("rollout_is", "importance_sampling", "topr", "decoupled_ppo", "m2po", "prime_rl", "prime_ipo"),
    *("fipo", "real"),
)
